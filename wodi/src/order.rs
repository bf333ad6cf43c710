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
        let candidates: Vec<usize> = (0..queue.len())
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
        let p = plan(&work, &hosts);
        p.queues[me].first().map(|&k| candidates[k])
    }
}
