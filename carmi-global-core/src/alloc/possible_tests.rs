//! Which waiting jobs could ever start, kept across inputs that change
//! nothing for them (a heartbeat's `LoadAvg`), and judged again when they do.

use super::tests::Sim;
use super::*;

const J1: JobId = JobId(1);

fn limits(name: &str, expr: &str, min: u32) -> jobs::ClassLimits {
    jobs::ClassLimits {
        name: name.into(),
        expression: expr.into(),
        min,
        max: min,
        rank: None,
    }
}

fn update(text: &str) -> ClassAd {
    ClassAd::parse_old(text).expect("test update")
}

fn started(s: &mut Sim) -> bool {
    let any = s.log.iter().any(|e| matches!(e, Effect::JobStarted { .. }));
    s.log.clear();
    any
}

#[test]
fn heartbeats_that_bring_machines_into_a_class_make_a_waiting_job_possible_and_start_it() {
    let mut s = Sim::new();
    s.machine("m0", "Mips = 5; LoadAvg = 0.9", 1);
    s.machine("m1", "Mips = 5; LoadAvg = 0.9", 1);
    s.step(|a| a.submit_job(J1, "alice", &[limits("calm", "LoadAvg < 0.3", 2)]))
        .unwrap();
    assert!(!started(&mut s));
    let why = s.a.impossible(J1).expect("no machine is calm");
    assert!(why.contains("has 0 matching"), "{why}");
    s.step(|a| a.on_machine_updated("m0", &update("LoadAvg = 0.1")));
    assert!(!started(&mut s));
    s.step(|a| a.judge_waiting());
    let why = s.a.impossible(J1).expect("one machine is calm");
    assert!(why.contains("has 1 matching"), "{why}");
    s.step(|a| a.on_machine_updated("m1", &update("LoadAvg = 0.2")));
    assert!(started(&mut s), "both machines are calm now");
    assert_eq!(s.a.job_phase(J1), Some(Phase::Running { grow: false }));
}

#[test]
fn a_heartbeat_that_changes_nothing_for_a_waiting_job_keeps_its_verdict() {
    let mut s = Sim::new();
    s.machine("m0", "Mips = 5; Arch = \"X86_64\"; LoadAvg = 0.9", 1);
    s.machine("m1", "Mips = 5; Arch = \"ARM\"; LoadAvg = 0.9", 1);
    s.step(|a| a.submit_job(J1, "alice", &[limits("x86", "Arch == \"X86_64\"", 2)]))
        .unwrap();
    s.step(|a| a.judge_waiting());
    let judged = s.a.possible_judged();
    // Neither machine's membership changes: nothing is worked out again,
    // however many heartbeats come.
    for load in ["0.5", "0.1", "0.7"] {
        s.step(|a| a.on_machine_updated("m0", &update(&format!("LoadAvg = {load}"))));
        s.step(|a| a.on_machine_updated("m1", &update(&format!("LoadAvg = {load}"))));
        s.step(|a| a.judge_waiting());
    }
    assert_eq!(s.a.possible_judged(), judged);
    assert!(s.a.impossible(J1).is_some());
    assert!(!started(&mut s));
    // m1 becomes a member: the verdict is worked out again, and the job starts.
    s.step(|a| a.on_machine_updated("m1", &update("Arch = \"X86_64\"")));
    assert!(s.a.possible_judged() > judged);
    assert!(started(&mut s));
}

#[test]
fn a_machine_leaving_a_class_is_counted_in_the_verdict_at_once() {
    let mut s = Sim::new();
    s.machine("m0", "Mips = 5; Arch = \"X86_64\"", 1);
    s.machine("m1", "Mips = 5; Arch = \"X86_64\"", 1);
    s.machine("m2", "Mips = 5; Arch = \"X86_64\"", 1);
    s.machine("m3", "Mips = 5; Arch = \"ARM\"", 1);
    s.machine("m4", "Mips = 5; Arch = \"ARM\"", 1);
    s.step(|a| a.submit_job(J1, "alice", &[limits("x86", "Arch == \"X86_64\"", 4)]))
        .unwrap();
    s.step(|a| a.judge_waiting());
    let why = s.a.impossible(J1).expect("3 of 4");
    assert!(why.contains("3 matching"), "{why}");
    s.step(|a| a.on_machine_updated("m2", &update("Arch = \"ARM\"")));
    s.step(|a| a.judge_waiting());
    let why = s.a.impossible(J1).expect("2 of 4");
    assert!(why.contains("2 matching"), "{why}");
    assert!(!started(&mut s));
}
