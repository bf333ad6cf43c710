use std::time::Duration;

use carmi_proto::ids::HostId;

use super::*;
use crate::ids::{StepId, WorkerId};
use crate::sched::{Output, Sched, SchedConfig, Verdict};

const SEC: Duration = Duration::from_secs(1);

/// A core with LongestFirst and one worker per speed, all joined.
fn core(speeds: &[f64]) -> (Sched, Vec<WorkerId>) {
    let mut s = Sched::new(SchedConfig::default(), Box::new(LongestFirst));
    s.set_class("c", speeds.len() as u32, Duration::ZERO);
    let mut workers = Vec::new();
    for (i, &speed) in speeds.iter().enumerate() {
        s.host_added(HostId(i as u64), "c", Some(speed), Duration::ZERO);
    }
    while let Some(o) = s.poll_output() {
        if let Output::Spawn { worker, .. } = o {
            s.worker_joined(worker, Duration::ZERO);
            workers.push(worker);
        }
    }
    s.sanity_check();
    (s, workers)
}

/// Submits steps `ids` as one batch; returns the (step, worker) assignments.
fn batch(s: &mut Sched, ids: &[u64], now: Duration) -> Vec<(u64, WorkerId, Ticket)> {
    for &i in ids {
        s.submit(StepId(i), None, now);
    }
    s.dispatch(now);
    let mut out = Vec::new();
    while let Some(o) = s.poll_output() {
        if let Output::Assign {
            step,
            worker,
            ticket,
        } = o
        {
            out.push((step.0, worker, ticket));
        }
    }
    s.sanity_check();
    out
}

/// Teaches the core how long each step takes on a speed-1 worker.
fn learn(s: &mut Sched, w: WorkerId, times: &[(u64, u64)], now: &mut Duration) {
    for &(step, secs) in times {
        let got = batch(s, &[step], *now);
        let (_, worker, ticket) = got[0];
        assert_eq!(worker, w);
        *now += SEC * secs as u32;
        let took = SEC * secs as u32;
        assert_eq!(s.result(w, ticket, took, took, *now), Verdict::Deliver);
    }
}

#[test]
fn a_long_step_waits_for_a_fast_host_on_its_way() {
    use crate::sched::{Board, HostBoard, Load, Slot};
    let me = WorkerView {
        worker: WorkerId(0),
        host: HostId(0),
        speed: Some(1.0),
    };
    let mut hosts = HostBoard::default();
    hosts.set(
        WorkerId(0),
        Some(Slot {
            speed: 1.0,
            load: Load::Idle,
            open: true,
            front: None,
        }),
    );
    // Planned whole (two steps) and walked (with 100 short steps more).
    for padding in [0u64, 100] {
        let mut queue = StepQueue::default();
        queue.push_back(Ticket(0), StepId(1), Some(100.0));
        queue.push_back(Ticket(1), StepId(2), Some(10.0));
        for i in 0..padding {
            queue.push_back(Ticket(2 + i), StepId(3 + i), Some(1.0));
        }
        let pick = |coming: &[f64]| {
            let board = Board {
                now: Duration::ZERO,
                hosts: &hosts,
                coming,
                coming_in: 10.0,
            };
            LongestFirst.pick(&queue, &me, &board, &|_| true)
        };
        // Alone, the slow worker takes the long step.
        assert_eq!(pick(&[]), Some(Ticket(0)), "padding {padding}");
        // A host four times as fast arrives in 10 s: it would end the long
        // step at 35 s instead of 100 s, so this worker takes the short one.
        assert_eq!(pick(&[4.0]), Some(Ticket(1)), "padding {padding}");
    }
}

#[test]
fn without_history_steps_go_out_in_submission_order() {
    let (mut s, w) = core(&[1.0, 1.0]);
    let got = batch(&mut s, &[5, 3, 9], Duration::ZERO);
    assert_eq!(
        got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(),
        vec![(5, w[0]), (3, w[1])]
    );
}

#[test]
fn with_history_the_longest_step_goes_first() {
    let (mut s, w) = core(&[1.0]);
    let mut now = Duration::ZERO;
    learn(&mut s, w[0], &[(1, 2), (2, 9), (3, 5)], &mut now);
    let first = batch(&mut s, &[1, 2, 3], now);
    assert_eq!(first.iter().map(|g| g.0).collect::<Vec<_>>(), vec![2]);
    // The rest follow longest first as the worker frees up.
    let (_, _, t) = first[0];
    now += 9 * SEC;
    s.result(w[0], t, 9 * SEC, 9 * SEC, now);
    let mut next = Vec::new();
    while let Some(o) = s.poll_output() {
        if let Output::Assign { step, .. } = o {
            next.push(step.0);
        }
    }
    assert_eq!(next, vec![3]);
}

#[test]
fn a_long_step_waits_for_a_fast_worker_instead_of_an_idle_slow_one() {
    // Worker 0 is four times as fast as worker 1.
    let (mut s, w) = core(&[4.0, 1.0]);
    let mut now = Duration::ZERO;
    // History: step 7 is 8 s of speed-1 work, step 8 is 1 s, learnt on
    // the fast worker (2 s and 0.25 s there).
    for (step, secs) in [(7u64, 2.0f64), (8, 0.25)] {
        let got = batch(&mut s, &[step], now);
        let (_, worker, ticket) = got[0];
        assert_eq!(
            worker, w[0],
            "the faster worker comes first when both are idle"
        );
        now += Duration::from_secs_f64(secs);
        let d = Duration::from_secs_f64(secs);
        s.result(worker, ticket, d, d, now);
    }
    assert_eq!(s.history().estimate(&StepId(7)), Some(8.0));
    // Now both are idle; the long step goes to the fast worker, and the
    // slow one gets the short step, not the long one.
    let got = batch(&mut s, &[8, 7], now);
    let placed: Vec<(u64, WorkerId)> = got.iter().map(|g| (g.0, g.1)).collect();
    assert!(placed.contains(&(7, w[0])), "{placed:?}");
    assert!(placed.contains(&(8, w[1])), "{placed:?}");
}
