//! One simulated run: the world set up from the configuration, the event
//! loop that feeds the scheduler core in virtual time until the master's
//! last cycle ends, and the summary of what happened.
//!
//! Kept apart from `lib.rs` (the configuration and the simulated world) so
//! that each file stays readable.

use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use carmi_api::msg::OwnerEvent;
use rand::SeedableRng;
use rand::rngs::StdRng;
use wodi::ids::{CycleId, StepId};
use wodi::plan::{Hysteresis, lower_bound};
use wodi::profile::sample_cycle;
use wodi::sched::{Dispatch, Sched, Verdict};

use super::{Ev, Lend, Queued, RunSummary, SimConfig, SimHost, SimRun, World, host_id, time};

/// Virtual seconds after which a run is abandoned (a pool whose owners
/// never leave cannot finish it).
const MAX_VIRTUAL_TIME: f64 = 365.0 * 24.0 * 3600.0;

/// The one resource class of a simulated run.
const CLASS: &str = "hosts";

/// Runs one simulation with the given dispatch policy.
pub fn simulate(cfg: &SimConfig, dispatch: Box<dyn Dispatch>) -> SimRun {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let n = cfg.profile.len();
    let mut world = World {
        cfg,
        now: 0.0,
        heap: BinaryHeap::new(),
        seq: 0,
        hosts: cfg
            .speeds
            .iter()
            .enumerate()
            .map(|(i, &speed)| SimHost {
                speed,
                actual: cfg
                    .actual_speeds
                    .as_ref()
                    .and_then(|a| a.get(i).copied())
                    .unwrap_or(speed),
                lend: Lend::Free,
                present: false,
                suspended_since: None,
                epoch: 0,
            })
            .collect(),
        demand: 0,
        excluded: vec![false; cfg.speeds.len()],
        workers: BTreeMap::new(),
        host_worker: BTreeMap::new(),
        times: sample_cycle(&cfg.profile, &mut rng),
        first_ready: None,
        started: vec![false; cfg.speeds.len()],
    };
    // Owner events in the run's time frame; those before the start only set
    // the initial state.
    let mut owners = cfg.owners.stream(cfg.speeds.len(), cfg.seed);
    let mut next_owner = owners.next();
    let mut sched = Sched::new(cfg.sched.clone(), dispatch);
    let mut bounds = vec![lower_bound(&world.times, &cfg.speeds)];
    let mut cycle_s = Vec::new();
    let mut cycle: u32 = 0;
    let mut cycle_start: f64 = 0.0;
    let mut open = n;
    let mut armed: Option<Duration> = None;
    let mut hold = Hysteresis::new(cfg.hosts_wanted, cfg.hysteresis);

    sched.set_class(CLASS, cfg.hosts_wanted, time(0.0));
    for i in 0..n {
        sched.submit(StepId(i as u64), Some(CycleId(0)), time(0.0));
    }
    sched.dispatch(time(0.0));
    world.flush(&mut sched);

    loop {
        // The stream is endless: take owner events only up to the next
        // simulated event, or the next owner event alone when nothing else is due.
        let next_owner_at = next_owner.as_ref().map(|e| e.time - cfg.owner_offset);
        let horizon = match (world.heap.peek().map(|q| q.at), next_owner_at) {
            (Some(a), Some(b)) => a.min(b.max(0.0)),
            (Some(a), None) => a,
            (None, Some(b)) => b.max(0.0),
            (None, None) => break,
        };
        while let Some(e) = next_owner.as_ref() {
            let at = e.time - cfg.owner_offset;
            if at > horizon {
                break;
            }
            if let OwnerEvent::Arrive | OwnerEvent::Leave = e.event {
                let present = e.event == OwnerEvent::Arrive;
                let host = e.host;
                world.push(at.max(0.0), Ev::Owner { host, present });
            }
            next_owner = owners.next();
        }
        let Some(Queued { at, ev, .. }) = world.heap.pop() else {
            break;
        };
        world.now = at;
        let now = at;
        match ev {
            Ev::Owner { host: h, present } => {
                let hs = &mut world.hosts[h];
                if hs.present == present {
                    continue;
                }
                hs.present = present;
                hs.epoch += 1;
                let epoch = hs.epoch;
                if present {
                    match hs.lend {
                        Lend::Free => hs.lend = Lend::Owner,
                        Lend::Granting => {
                            // Taken back before the grant completed: CARMI
                            // grants another host instead.
                            hs.lend = Lend::Owner;
                            world.demand += 1;
                            world.grant();
                        }
                        Lend::Granted if hs.suspended_since.is_none() => {
                            hs.suspended_since = Some(now);
                            let at = now + cfg.policy.preempt_after;
                            world.push(
                                at,
                                Ev::Preempt {
                                    host: h,
                                    since: now,
                                },
                            );
                            if let Some(&w) = world.host_worker.get(&h) {
                                world.pause(w);
                            }
                            sched.host_suspended(host_id(h), time(now));
                        }
                        _ => {}
                    }
                } else {
                    let wait = if world.hosts[h].suspended_since.is_some() {
                        cfg.policy.continue_after
                    } else {
                        cfg.policy.start_after
                    };
                    world.push(now + wait, Ev::Idle { host: h, epoch });
                }
            }
            Ev::Idle { host: h, epoch } => {
                let hs = &mut world.hosts[h];
                if hs.epoch != epoch || hs.present {
                    continue;
                }
                match hs.lend {
                    Lend::Owner => {
                        hs.lend = Lend::Free;
                        world.grant();
                    }
                    Lend::Granted if hs.suspended_since.is_some() => {
                        hs.suspended_since = None;
                        if let Some(&w) = world.host_worker.get(&h) {
                            world.resume(w);
                        }
                        sched.host_resumed(host_id(h), time(now));
                    }
                    _ => {}
                }
            }
            Ev::Preempt { host: h, since } => {
                let hs = &mut world.hosts[h];
                if hs.lend != Lend::Granted || hs.suspended_since != Some(since) {
                    continue;
                }
                hs.suspended_since = None;
                hs.lend = Lend::Owner;
                hs.epoch += 1;
                let epoch = hs.epoch;
                if !hs.present {
                    world.push(now + cfg.policy.start_after, Ev::Idle { host: h, epoch });
                }
                if let Some(w) = world.host_worker.remove(&h) {
                    world.workers.remove(&w);
                }
                sched.host_lost(host_id(h), time(now));
            }
            Ev::Granted { host: h } => {
                if world.hosts[h].lend != Lend::Granting {
                    continue;
                }
                world.hosts[h].lend = Lend::Granted;
                let speed = world.hosts[h].speed;
                sched.host_added(host_id(h), CLASS, Some(speed), time(now));
            }
            Ev::WorkerReady { worker } => {
                let Some(w) = world.workers.get_mut(&worker) else {
                    continue;
                };
                w.ready = true;
                world.first_ready.get_or_insert(now);
                sched.worker_joined(worker, time(now));
                world.start_next(worker);
            }
            Ev::StepDone { worker, epoch } => {
                let Some(w) = world.workers.get_mut(&worker) else {
                    continue;
                };
                if w.epoch != epoch {
                    continue;
                }
                let Some(c) = w.current.take() else {
                    continue;
                };
                let cpu = c.cpu + c.since.map_or(0.0, |s| now - s);
                let verdict = sched.result(
                    worker,
                    c.ticket,
                    time(cpu),
                    time(now - c.started),
                    time(now),
                );
                if verdict == Verdict::Deliver {
                    open -= 1;
                    if open == 0 {
                        cycle_s.push(now - cycle_start.max(world.first_ready.unwrap_or(0.0)));
                        cycle += 1;
                        if cycle == cfg.cycles {
                            sched.finish(time(now));
                            world.flush(&mut sched);
                            break;
                        }
                        cycle_start = now;
                        if let Some(tolerance) = cfg.fewest_hosts {
                            let steps: Vec<StepId> = (0..n as u64).map(StepId).collect();
                            if let Some(k) = sched.fewest_hosts(&steps, tolerance) {
                                let k = hold.update(k.min(cfg.hosts_wanted));
                                sched.set_class(CLASS, k, time(now));
                            }
                        }
                        world.times = sample_cycle(&cfg.profile, &mut rng);
                        bounds.push(lower_bound(&world.times, &cfg.speeds));
                        open = n;
                        for i in 0..n {
                            sched.submit(
                                StepId(i as u64),
                                Some(CycleId(u64::from(cycle))),
                                time(now),
                            );
                        }
                        sched.dispatch(time(now));
                    }
                }
                world.start_next(worker);
            }
            Ev::Deadline(d) => {
                armed = None;
                sched.on_deadline(d.max(time(now)));
            }
        }
        world.flush(&mut sched);
        if let Some(d) = sched.next_deadline()
            && armed.is_none_or(|a| d < a)
        {
            armed = Some(d);
            world.push(d.as_secs_f64().max(now), Ev::Deadline(d));
        }
        if now > MAX_VIRTUAL_TIME {
            // A run that cannot finish (no host ever free): stop rather than spin.
            break;
        }
    }
    let end = world.now;
    let stats = sched.stats(time(end));
    let begin = world.first_ready.unwrap_or(0.0);
    let run_length_s = end - begin;
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
        adds: stats.hosts_added,
        losses: stats.hosts_lost,
        mean_hosts: if run_length_s > 0.0 {
            stats.occupancy_s / run_length_s
        } else {
            0.0
        },
        lower_bound_s: bounds.iter().sum(),
        cycle_s,
        cycle_bound_s: bounds,
    };
    SimRun { summary, stats }
}
