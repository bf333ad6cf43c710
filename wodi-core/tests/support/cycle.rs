//! A pool in virtual time for the scheduler core alone: hosts that compute
//! exactly their step's work over their speed, no owners, no network. The
//! scale tests and the `sched_scale` example drive cycles on it. Uses only
//! the core's oldest public calls, so the example also builds against
//! earlier versions of the core, to compare them side by side.
// Shared by the scale tests and the example, each of which reads a part.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use carmi_proto::ids::HostId;
use wodi_core::ids::{StepId, WorkerId};
use wodi_core::order::Ordering;
use wodi_core::sched::{Output, Sched, SchedConfig, Ticket, Verdict};

/// A step running: when it ends, on which worker, its ticket, how long it takes.
type Running = (Duration, WorkerId, Ticket, Duration);

/// A core with one joined worker per host speed, all ready at time 0.
pub struct Pool {
    /// The core.
    pub sched: Sched,
    /// Each worker's speed.
    pub speed: HashMap<WorkerId, f64>,
    /// Virtual time now.
    pub now: Duration,
}

/// What one cycle did.
#[derive(Debug)]
pub struct Cycle {
    /// From the submission to the last result, seconds of virtual time.
    pub length_s: f64,
    /// Steps in the order they were first assigned.
    pub order: Vec<StepId>,
    /// Wall time spent in the core's calls (submit, dispatch, result).
    pub core_wall: Duration,
}

impl Pool {
    /// A pool of hosts of the given speeds with `ordering`'s policy.
    pub fn new(speeds: &[f64], ordering: Ordering) -> Pool {
        let mut sched = Sched::new(SchedConfig::default(), ordering.dispatch());
        sched.set_class("c", speeds.len() as u32, Duration::ZERO);
        for (i, &s) in speeds.iter().enumerate() {
            sched.host_added(HostId(i as u64), "c", Some(s), Duration::ZERO);
        }
        let mut speed = HashMap::new();
        let mut spawned = Vec::new();
        while let Some(o) = sched.poll_output() {
            if let Output::Spawn { worker, host } = o {
                speed.insert(worker, speeds[host.0 as usize]);
                spawned.push(worker);
            }
        }
        for w in spawned {
            sched.worker_joined(w, Duration::ZERO);
        }
        while sched.poll_output().is_some() {}
        Pool {
            sched,
            speed,
            now: Duration::ZERO,
        }
    }

    /// Runs one cycle of steps `work[i]` (seconds on a speed-1 host),
    /// submitted in that order as steps 0, 1, ..., to its last result.
    pub fn cycle(&mut self, work: &[f64]) -> Cycle {
        let start = self.now;
        let mut core_wall = Duration::ZERO;
        let mut order = Vec::with_capacity(work.len());
        let mut running: BinaryHeap<Reverse<Running>> = BinaryHeap::new();
        let t0 = Instant::now();
        for i in 0..work.len() {
            self.sched.submit(StepId(i as u64), None, self.now);
        }
        self.sched.dispatch(self.now);
        core_wall += t0.elapsed();
        self.collect(work, &mut running, &mut order);
        let mut left = work.len();
        while let Some(Reverse((end, worker, ticket, took))) = running.pop() {
            self.now = end;
            let t0 = Instant::now();
            let verdict = self.sched.result(worker, ticket, took, took, self.now);
            core_wall += t0.elapsed();
            assert_eq!(verdict, Verdict::Deliver, "one copy per step here");
            left -= 1;
            self.collect(work, &mut running, &mut order);
        }
        assert_eq!(left, 0, "every step was delivered");
        Cycle {
            length_s: (self.now - start).as_secs_f64(),
            order,
            core_wall,
        }
    }

    fn collect(
        &mut self,
        work: &[f64],
        running: &mut BinaryHeap<Reverse<Running>>,
        order: &mut Vec<StepId>,
    ) {
        while let Some(o) = self.sched.poll_output() {
            if let Output::Assign {
                ticket,
                step,
                worker,
            } = o
            {
                let took = Duration::from_secs_f64(work[step.0 as usize] / self.speed[&worker]);
                running.push(Reverse((self.now + took, worker, ticket, took)));
                order.push(step);
            }
        }
    }
}
