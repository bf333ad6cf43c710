//! A job possible at submit that the pool can no longer start once a
//! machine is lost (issue 15, item 2): flagged in `carmi q` with why,
//! held when submitted with `on_impossible = hold`, and the jobs behind it
//! start on what is left.

use super::*;
use crate::alloc::Phase;

#[test]
fn a_job_made_impossible_by_a_lost_machine_is_flagged_or_held_and_lets_later_jobs_run() {
    let mut r = Router::new(RouterConfig::default());
    advertise(&mut r, LinkId(1), "m0", vec![]);
    advertise(&mut r, LinkId(2), "m1", vec![]);
    r.on_executable_stored(&exe("master"));
    step(&mut r, |r| {
        r.on_link_opened(ADMIN, Role::Admin, Duration::ZERO)
    });
    let submit = |r: &mut Router, text: &str| {
        let spec = carmi_proto::submit::parse("j", &format!("executable = master\n{text}queue\n"))
            .unwrap();
        let (sends, _) = step(r, |r| {
            r.on_message(ADMIN, door::submit_msg(spec), Duration::ZERO)
        });
        assert!(
            matches!(sends[0], (ADMIN, FromGlobal::Submitted { .. })),
            "{sends:?}"
        );
    };
    // Job 1 holds m1's two slots; 2 (hold) and 3 (wait) want all four
    // slots, possible while m1 is there; 4 wants one and waits behind them.
    submit(&mut r, "requirements = Name == \"m1\"\nmachine_count = 2\n");
    submit(&mut r, "on_impossible = hold\nmachine_count = 4\n");
    submit(&mut r, "machine_count = 4\n");
    submit(&mut r, "machine_count = 1\n");
    let phase = |r: &Router, j: u64| r.allocator().job_phase(JobId(j));
    assert_eq!(phase(&r, 4), Some(Phase::Waiting));
    assert_eq!(r.allocator().impossible(JobId(2)), None);

    let (_, records) = step(&mut r, |r| r.machine_lost("m1", "test: m1 is gone".into()));
    let why = "cannot start: needs 4 machines at once; the pool has 2 slots online";
    assert!(
        records.contains(&Record::Held {
            job: JobId(2),
            reason: format!("{why} (on_impossible = hold)"),
        }),
        "{records:?}"
    );
    assert_eq!(phase(&r, 2), Some(Phase::Held));
    assert!(
        matches!(phase(&r, 4), Some(Phase::Running { .. })),
        "job 4 runs on m0"
    );
    let (sends, _) = step(&mut r, |r| {
        r.on_message(ADMIN, ToGlobal::Queue, Duration::ZERO)
    });
    let [(ADMIN, FromGlobal::Queue(jobs))] = &sends[..] else {
        panic!("{sends:?}");
    };
    let three = jobs.iter().find(|j| j.job == JobId(3)).unwrap();
    assert_eq!(
        (three.state.as_str(), three.note.as_deref()),
        ("waiting", Some(why))
    );
}
