//! History-based dispatch: the longest steps first, each to the worker on
//! which it would finish earliest (longest processing time on machines of
//! different speeds), as the paper's WoDi does and a little better.
//!
//! When a worker is free, [`LongestFirst`] plans the queue with
//! [`crate::plan::plan`] over every ready worker (a busy one counts from when
//! its current step should end) and gives the free worker the first step the
//! plan puts on it. If the plan puts nothing on it (every queued step would
//! finish sooner on a faster worker that frees up soon), the worker waits.
//! Steps without history go first, in submission order, so that history
//! builds up; when no queued step has history the policy is first come,
//! first served.

use std::collections::VecDeque;

use crate::plan::{Host, plan};
use crate::sched::{Board, Dispatch, Ticket, WorkerView};

/// How many queued steps (from the front) a plan considers: all of a cycle,
/// while a bag of a million steps costs no more per pick than a thousand.
const WINDOW: usize = 1024;

/// A busy worker whose step runs this many times over its estimate is not
/// counted on to free up: its estimate is wrong or it is stuck.
const OVERDUE: f64 = 2.0;

/// Which dispatch policy a run uses; the master chooses it in its
/// `wodi::master::MasterConfig`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// [`LongestFirst`]: WoDi's own.
    #[default]
    LongestFirst,
    /// First come, first served ([`crate::sched::ArrivalOrder`]): the order
    /// the master submitted, as applications did before WoDi.
    Arrival,
}

impl Ordering {
    /// The policy object for the scheduler core.
    pub fn dispatch(self) -> Box<dyn Dispatch> {
        match self {
            Ordering::LongestFirst => Box::new(LongestFirst),
            Ordering::Arrival => Box::new(crate::sched::ArrivalOrder),
        }
    }
}

/// Longest first by history, placed where each step finishes earliest.
#[derive(Clone, Copy, Debug, Default)]
pub struct LongestFirst;

impl Dispatch for LongestFirst {
    fn pick(
        &mut self,
        queue: &VecDeque<Ticket>,
        worker: &WorkerView,
        board: &Board<'_>,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        // Steps without history go first, in submission order: when the
        // first eligible one has none, it is the answer, with no planning
        // (a bag of distinct steps never pays for more than this).
        let first = (0..queue.len()).find(|&i| eligible(i))?;
        if board.history.estimate(&(board.step_of)(first)).is_none() {
            return Some(first);
        }
        let candidates: Vec<usize> = (first..queue.len())
            .filter(|&i| eligible(i))
            .take(WINDOW)
            .collect();
        let work: Vec<Option<f64>> = candidates
            .iter()
            .map(|&i| board.history.estimate(&(board.step_of)(i)))
            .collect();
        if work.iter().all(Option::is_none) {
            return candidates.first().copied();
        }
        let now = board.now.as_secs_f64();
        let mut me = None;
        let mut hosts = Vec::with_capacity(board.workers.len());
        for w in board.workers {
            let speed = w.speed.unwrap_or(1.0);
            let free_in = match w.busy_with {
                _ if w.worker == worker.worker => 0.0,
                None => 0.0,
                Some((step, since)) => {
                    // A step without history, or far past its estimate, gives
                    // no idea when the worker frees up: leave it out.
                    let Some(est) = board.history.estimate(&step) else {
                        continue;
                    };
                    let elapsed = now - since.as_secs_f64();
                    let total = est / speed;
                    if elapsed > OVERDUE * total.max(1e-3) {
                        continue;
                    }
                    (total - elapsed).max(0.0)
                }
            };
            if w.worker == worker.worker {
                me = Some(hosts.len());
            }
            hosts.push(Host { free_in, speed });
        }
        let me = match me {
            Some(i) => i,
            None => {
                // The free worker is not on the board (should not happen):
                // plan as if it were there.
                hosts.push(Host {
                    free_in: 0.0,
                    speed: worker.speed.unwrap_or(1.0),
                });
                hosts.len() - 1
            }
        };
        // Hosts on their way count as free when they arrive; if the plan
        // then leaves this worker nothing, it plans without them, so that a
        // host that never comes cannot stall the queue.
        if !board.coming.is_empty() {
            let mut with = hosts.clone();
            with.extend(board.coming.iter().map(|&speed| Host {
                free_in: board.coming_in,
                speed,
            }));
            if let Some(&k) = plan(&work, &with).queues[me].first() {
                return Some(candidates[k]);
            }
        }
        let p = plan(&work, &hosts);
        p.queues[me].first().map(|&k| candidates[k])
    }
}

#[cfg(test)]
mod tests {
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
        use crate::plan::History;
        use crate::sched::{Board, WorkerLoad};
        let mut history = History::new();
        history.observe(StepId(1), 100.0, 1.0);
        history.observe(StepId(2), 10.0, 1.0);
        let queue: VecDeque<Ticket> = [Ticket(0), Ticket(1)].into();
        let steps = [StepId(1), StepId(2)];
        let me = WorkerView {
            worker: WorkerId(0),
            host: HostId(0),
            speed: Some(1.0),
        };
        let loads = [WorkerLoad {
            worker: WorkerId(0),
            speed: Some(1.0),
            busy_with: None,
        }];
        let step_of = |i: usize| steps[i];
        let pick = |coming: &[f64]| {
            let board = Board {
                now: Duration::ZERO,
                workers: &loads,
                step_of: &step_of,
                history: &history,
                coming,
                coming_in: 10.0,
            };
            LongestFirst.pick(&queue, &me, &board, &|_| true)
        };
        // Alone, the slow worker takes the long step.
        assert_eq!(pick(&[]), Some(0));
        // A host four times as fast arrives in 10 s: it would end the long
        // step at 35 s instead of 100 s, so this worker takes the short one.
        assert_eq!(pick(&[4.0]), Some(1));
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
}
