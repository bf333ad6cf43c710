//! History-based dispatch: the longest steps first, each to the worker on
//! which it would finish earliest (longest processing time on machines of
//! different speeds), as the paper's WoDi does and a little better.
//!
//! When a worker is free, [`LongestFirst`] gives it the first step that
//! longest-processing-time list scheduling of the whole queue, over every
//! ready worker (a busy one counts from when its current step should end),
//! puts on it. If the plan puts nothing on it (every queued step would
//! finish sooner on a faster worker that frees up soon), the worker waits.
//! Steps without history go first, in submission order, so that history
//! builds up.
//!
//! At scale the plan is not computed: the core asks its free workers
//! fastest first, and a free worker only loses a step to a *faster* host
//! (it beats every slower or equally fast one, being free now). So the
//! policy walks the queue longest first (an ordered set, however many steps
//! are queued and in whatever order they came) and, for each step, asks the
//! board for the faster host that would end it soonest (per distinct speed,
//! the one free soonest: an ordered set too), reserving the step for that
//! host when it beats this worker, until a step is left for this worker.
//! That is exactly the plan's first step for this worker, found in
//! O(log steps + log hosts) per step looked at (times the number of
//! distinct faster speeds). The walk looks at [`WALK`] steps at most; past
//! them the worker takes the longest step it would end by the fluid bound
//! of the queue on every ready worker, or waits if it would end none by
//! then. For a small cycle (at most 64 steps and 64 hosts) the plan is
//! computed as before, with [`crate::plan::plan`]'s multifit packing.

use crate::ids::WorkerId;
use crate::plan::{Host, plan};
use crate::sched::{Board, Dispatch, Load, Slot, StepQueue, Ticket, WorkerView};

/// A queue of at most this many steps, on at most [`PLAN_HOSTS`] ready
/// workers, is planned whole with [`crate::plan::plan`] (LPT or a multifit
/// packing, whichever ends sooner): a bounded cost, and the packing pays
/// on the small stable cycles WoDi repeats.
const PLAN_STEPS: usize = 64;
/// See [`PLAN_STEPS`].
const PLAN_HOSTS: usize = 64;

/// Steps a decision at scale reserves for faster hosts before it falls back
/// to the fluid bound (see the module documentation).
pub const WALK: usize = 64;

/// Workers of one speed band a decision looks at (soonest free first, not
/// overdue, not reserved yet) for one step.
const PEEK: usize = 4;

/// Workers of one speed band a decision looks at in all for one step: more
/// are overdue or reserved only in a pathological pool.
const SCAN: usize = 4 * PEEK + WALK;

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
    fn fastest_first(&self) -> bool {
        true
    }

    fn pick(
        &mut self,
        queue: &StepQueue,
        worker: &WorkerView,
        board: &Board<'_>,
        eligible: &dyn Fn(Ticket) -> bool,
    ) -> Option<Ticket> {
        // Steps without history go first, in submission order: no planning
        // (a bag of distinct steps never pays for more than this).
        if let Some(t) = queue.without_estimate().find(|t| eligible(*t)) {
            return Some(t);
        }
        if queue.len() <= PLAN_STEPS && board.hosts.len() <= PLAN_HOSTS {
            return small_plan(queue, worker, board, eligible);
        }
        let speed = worker
            .speed
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0);
        // Hosts on their way count as free when they arrive; if the walk
        // then leaves this worker nothing, it walks without them, so that a
        // host that never comes cannot stall the queue.
        if !board.coming.is_empty()
            && let Some(t) = walk(queue, speed, board, true, eligible)
        {
            return Some(t);
        }
        walk(queue, speed, board, false, eligible)
    }
}

/// Whether a busy worker's step is so far past its estimate that it is not
/// counted on to end.
fn overdue(slot: &Slot, now: f64) -> bool {
    match slot.load {
        Load::Until { end, total } => now - (end - total) > OVERDUE * total.max(1e-3),
        _ => false,
    }
}

/// The whole queue planned with [`crate::plan::plan`] over every ready worker.
fn small_plan(
    queue: &StepQueue,
    worker: &WorkerView,
    board: &Board<'_>,
    eligible: &dyn Fn(Ticket) -> bool,
) -> Option<Ticket> {
    let candidates: Vec<Ticket> = queue.by_arrival().filter(|t| eligible(*t)).collect();
    let work: Vec<Option<f64>> = candidates.iter().map(|t| queue.estimate(*t)).collect();
    if work.is_empty() {
        return None;
    }
    let now = board.now.as_secs_f64();
    let mut me = None;
    let mut hosts = Vec::with_capacity(board.hosts.len() + 1);
    for (w, slot) in board.hosts.iter() {
        let free_in = if w == worker.worker {
            0.0
        } else {
            // A step without history, or far past its estimate, gives
            // no idea when the worker frees up: leave it out.
            match slot.free_in(now) {
                Some(f) if !overdue(slot, now) => f,
                _ => continue,
            }
        };
        if w == worker.worker {
            me = Some(hosts.len());
        }
        hosts.push(Host {
            free_in,
            speed: slot.speed,
        });
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

/// A faster host that a step of the walk was reserved for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Worker(WorkerId),
    /// The i-th host on its way (fastest first).
    Coming(usize),
}

/// A host with the steps reserved for it so far: when it would be free.
#[derive(Clone, Copy, Debug)]
struct Reserved {
    who: Who,
    speed: f64,
    free_in: f64,
}

/// The faster host that would end `work` soonest, and when, if it ends it
/// no later than `mine` (this worker's end); reservations count.
fn best_faster(
    work: f64,
    speed: f64,
    mine: f64,
    board: &Board<'_>,
    reserved: &[Reserved],
    coming: &[f64],
) -> Option<(Reserved, f64)> {
    let now = board.now.as_secs_f64();
    let mut best: Option<(Reserved, f64)> = None;
    let consider = |r: Reserved, best: &mut Option<(Reserved, f64)>| {
        let end = r.free_in + work / r.speed;
        let better = match best {
            None => end <= mine + 1e-12,
            Some((b, e)) => end < *e - 1e-12 || ((end - *e).abs() <= 1e-12 && r.speed > b.speed),
        };
        if better {
            *best = Some((r, end));
        }
    };
    for r in reserved {
        consider(*r, &mut best);
    }
    // Hosts on their way are used fastest first, so the unreserved ones
    // begin after the reserved ones.
    let used = reserved
        .iter()
        .filter(|r| matches!(r.who, Who::Coming(_)))
        .count();
    if let Some(&s) = coming.get(used)
        && s > speed
    {
        consider(
            Reserved {
                who: Who::Coming(used),
                speed: s,
                free_in: board.coming_in,
            },
            &mut best,
        );
    }
    for (top, group) in board.hosts.faster_than(speed) {
        // Bands come fastest first: once even the fastest host of a band,
        // free now, could not beat the best so far, no slower one can.
        if work / top > best.map_or(mine, |b| b.1) + 1e-12 {
            break;
        }
        // Within a band the soonest free is nearly the best (speeds differ
        // by a few percent): the best of the first few that may take it.
        let free = group.take(SCAN).filter(|(w, slot)| {
            !overdue(slot, now) && !reserved.iter().any(|r| r.who == Who::Worker(*w))
        });
        let free = free.take(PEEK);
        for (w, slot) in free {
            let free_in = slot.free_in(now).unwrap_or(0.0);
            consider(
                Reserved {
                    who: Who::Worker(w),
                    speed: slot.speed,
                    free_in,
                },
                &mut best,
            );
        }
    }
    best
}

/// The plan's first step for `me` at scale (see the module documentation).
fn walk(
    queue: &StepQueue,
    speed: f64,
    board: &Board<'_>,
    with_coming: bool,
    eligible: &dyn Fn(Ticket) -> bool,
) -> Option<Ticket> {
    let coming: &[f64] = if with_coming { board.coming } else { &[] };
    let mut reserved: Vec<Reserved> = Vec::new();
    for (n, (ticket, work)) in queue.longest_first().enumerate() {
        if n >= WALK {
            return fluid_pick(queue, speed, board, eligible);
        }
        if !eligible(ticket) {
            continue;
        }
        let mine = work / speed;
        let Some((host, end)) = best_faster(work, speed, mine, board, &reserved, coming) else {
            return Some(ticket);
        };
        match reserved.iter_mut().find(|r| r.who == host.who) {
            Some(r) => r.free_in = end,
            None => reserved.push(Reserved {
                free_in: end,
                ..host
            }),
        }
    }
    None
}

/// Past [`WALK`] steps: the longest eligible step this worker would end by
/// the time the queue and the work in hand, spread over every ready worker
/// by speed, would be done; `None` if it would end none by then.
fn fluid_pick(
    queue: &StepQueue,
    speed: f64,
    board: &Board<'_>,
    eligible: &dyn Fn(Ticket) -> bool,
) -> Option<Ticket> {
    let (speeds, in_hand) = board.hosts.capacity(board.now.as_secs_f64());
    if speeds <= 0.0 {
        return queue.longest_first().map(|(t, _)| t).find(|t| eligible(*t));
    }
    let makespan = (queue.known_work() + in_hand) / speeds;
    queue
        .longest_up_to(makespan * speed)
        .map(|(t, _)| t)
        .find(|t| eligible(*t))
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
