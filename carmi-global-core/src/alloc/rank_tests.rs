//! A class's `Rank` from `DefineClass`: among matching machines, higher rank first.

use carmi_proto::msg::{FailureCode, Reply};

use super::tests::{Sim, r};
use super::*;

const J1: JobId = JobId(1);

#[test]
fn addhosts_takes_the_highest_ranked_matching_machines_first() {
    let mut s = Sim::new();
    // Speed alone would pick fast1 and fast2; the rank prefers memory.
    let small_fast = s.machine("fast1", "Mips = 9000; Memory = 512; Kind = \"a\"", 1)[0];
    let _ = s.machine("fast2", "Mips = 8000; Memory = 1024; Kind = \"a\"", 1)[0];
    let big_slow = s.machine("slow1", "Mips = 100; Memory = 8192; Kind = \"a\"", 1)[0];
    let mid_slow = s.machine("slow2", "Mips = 200; Memory = 4096; Kind = \"a\"", 1)[0];
    let _other = s.machine("other", "Mips = 1; Memory = 99999; Kind = \"b\"", 1)[0];
    s.step(|a| a.on_job_created(J1, "alice"));
    s.step(|a| a.define_class_ranked(J1, r(J1, 1), "c", "Kind == \"a\"", Some("Memory")));
    s.expect_done(r(J1, 1));
    s.step(|a| a.add_hosts(J1, r(J1, 2), "c", 2, 2));
    let mut got = s.expect_grant(r(J1, 2), 0);
    got.sort();
    let mut want = vec![big_slow, mid_slow];
    want.sort();
    assert_eq!(
        got, want,
        "the two biggest-memory members, not the fastest or a non-member"
    );

    // Redefined without a rank: speed decides again.
    s.step(|a| a.define_class(J1, r(J1, 3), "c", "Kind == \"a\""));
    s.expect_done(r(J1, 3));
    s.step(|a| a.add_hosts(J1, r(J1, 4), "c", 1, 1));
    assert_eq!(s.expect_grant(r(J1, 4), 0), vec![small_fast]);
}

#[test]
fn a_rank_that_does_not_parse_is_refused_with_its_position() {
    let mut s = Sim::new();
    s.step(|a| a.on_job_created(J1, "alice"));
    s.step(|a| a.define_class_ranked(J1, r(J1, 1), "c", "true", Some("Memory *")));
    let msg = s.expect_failed(r(J1, 1), FailureCode::BadExpression);
    assert!(msg.contains("rank") && msg.contains("column"), "{msg}");
}

#[test]
fn class_spawn_prefers_the_best_ranked_free_host() {
    let mut s = Sim::new();
    let fast_small = s.machine("fast", "Mips = 9000; Memory = 512", 1)[0];
    let slow_big = s.machine("slow", "Mips = 100; Memory = 8192", 1)[0];
    s.step(|a| a.on_job_created(J1, "alice"));
    s.step(|a| a.define_class_ranked(J1, r(J1, 1), "c", "true", Some("Memory")));
    s.expect_done(r(J1, 1));
    s.step(|a| a.add_hosts(J1, r(J1, 2), "c", 2, 2));
    let mut got = s.expect_grant(r(J1, 2), 0);
    got.sort();
    let mut want = vec![fast_small, slow_big];
    want.sort();
    assert_eq!(got, want);
    let target = carmi_proto::msg::SpawnTarget::Class("c".into());
    assert_eq!(s.a.pick_spawn_host(J1, &target), Ok(slow_big));
}

#[test]
fn class_definitions_and_the_queue_show_each_class_rank() {
    let mut s = Sim::new();
    s.step(|a| a.on_job_created(J1, "alice"));
    s.step(|a| a.define_class_ranked(J1, r(J1, 1), "big", "true", Some("Memory * 2")));
    s.expect_done(r(J1, 1));
    s.step(|a| a.define_class(J1, r(J1, 2), "any", "true"));
    s.expect_done(r(J1, 2));
    s.step(|a| a.class_definitions(J1, r(J1, 3)));
    let Reply::Classes(defs) = s.expect_done(r(J1, 3)) else {
        panic!("GetClassDefinitions answers with Classes");
    };
    let ranks: Vec<(String, Option<String>)> = defs.into_iter().map(|d| (d.name, d.rank)).collect();
    assert_eq!(
        ranks,
        vec![
            ("any".to_string(), None),
            ("big".to_string(), Some("Memory * 2".to_string())),
        ]
    );

    // A submitted class's rank is shown by `carmi q` as well.
    let limits = ClassLimits {
        name: "c".into(),
        expression: "true".into(),
        min: 0,
        max: 1,
        rank: Some("KFlops".into()),
    };
    s.step(|a| {
        a.submit_job(JobId(2), "bob", &[limits])
            .expect("a valid job")
    });
    let status = s.a.class_status(JobId(2));
    assert_eq!(status[0].rank.as_deref(), Some("KFlops"));
    assert_eq!(s.a.class_status(J1)[0].rank, None);
}
