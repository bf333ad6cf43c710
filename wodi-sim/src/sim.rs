//! One simulated run: the pool and the WoDi side set up from the
//! configuration, the event loop that carries every event to its side in
//! virtual time until the master's last cycle ends, and the summary.

use rand::SeedableRng;
use rand::rngs::StdRng;
use wodi_core::order::Ordering;

use crate::config::{MAX_VIRTUAL_TIME, RunSummary, SimConfig, SimRun};
use crate::pool::Pool;
use crate::queue::Queue;
use crate::run::Wodi;

/// Runs one simulation with the given step ordering.
pub fn simulate(cfg: &SimConfig, ordering: Ordering) -> SimRun {
    let mut q = Queue::default();
    let mut pool = Pool::new(cfg.pool.clone(), &cfg.speeds);
    let mut wodi = Wodi::new(cfg, ordering, StdRng::seed_from_u64(cfg.seed));
    // Owner events in the run's time frame; those before the start only set
    // the owners' state, before the machines start.
    let scale = |t: f64| (t - cfg.owner_offset) / cfg.owner_speedup;
    let mut owners = cfg.owners.stream(cfg.speeds.len(), cfg.seed);
    let mut next_owner = owners.next();
    while let Some(e) = next_owner.as_ref().filter(|e| scale(e.time) < 0.0) {
        pool.owner_event(e.host, e.event, scale(e.time), &mut q);
        next_owner = owners.next();
    }
    pool.start(&mut q);
    let mut out = Vec::new();
    loop {
        // The stream is endless: take owner events only up to the next
        // simulated event, or the next owner event alone when nothing else is due.
        let next_owner_at = next_owner.as_ref().map(|e| scale(e.time));
        let horizon = match (q.peek_at(), next_owner_at) {
            (Some(a), Some(b)) => a.min(b.max(0.0)),
            (Some(a), None) => a,
            (None, Some(b)) => b.max(0.0),
            (None, None) => break,
        };
        while let Some(e) = next_owner.as_ref() {
            let at = scale(e.time);
            if at > horizon {
                break;
            }
            pool.owner_event(e.host, e.event, at, &mut q);
            next_owner = owners.next();
        }
        let Some(ev) = q.pop() else {
            break;
        };
        if !pool.handle(&ev, &mut q, &mut out) {
            wodi.handle(&ev, &mut pool, &mut q);
        }
        for msg in out.drain(..) {
            wodi.on_carmi(msg, &mut pool, &mut q);
        }
        if wodi.done() || q.now > MAX_VIRTUAL_TIME {
            // Done, or a run that cannot finish (no host ever free).
            break;
        }
    }
    let end = q.now;
    let stats = wodi.stats().0.cloned().unwrap_or_default();
    let begin = wodi.first_ready.unwrap_or(0.0);
    let run_length_s = end - begin;
    let (cycle_s, bounds) = wodi.cycles();
    let summary = RunSummary {
        run_length_s,
        occupancy_s: stats.occupancy_s,
        cpu_time_s: stats.cpu_time_s,
        useful_cpu_time_s: stats.useful_cpu_time_s,
        efficiency: if stats.occupancy_s > 0.0 {
            stats.useful_cpu_time_s / stats.occupancy_s
        } else {
            0.0
        },
        adds: stats.hosts.added,
        losses: stats.hosts.lost,
        grants: crate::grants::split_grants(&stats),
        mean_hosts: if run_length_s > 0.0 {
            stats.occupancy_s / run_length_s
        } else {
            0.0
        },
        lower_bound_s: bounds.iter().sum(),
        cycle_s: cycle_s.to_vec(),
        cycle_bound_s: bounds.to_vec(),
    };
    SimRun { summary, stats }
}
