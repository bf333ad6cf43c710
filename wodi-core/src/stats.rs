//! Statistics of a run in the paper's terms (its Section 4.1): execution
//! time, occupancy (host time allocated to the run), CPU time (what the
//! workers measured around their steps), busy time (host time spent on
//! steps), efficiency = busy time / occupancy (the paper's), CPU efficiency =
//! CPU time / occupancy, hosts added and lost, the time of every step, and a timeline of each
//! host's allocated, suspended, busy and lost periods.
//!
//! The scheduler core keeps the raw records ([`RunRecord`], [`HostRecord`])
//! as it goes; [`Stats::compute`] turns them into the serializable summary.

use std::collections::HashMap;
use std::time::Duration;

use carmi_proto::ids::HostId;
use serde::{Deserialize, Serialize};

use crate::ids::{CycleId, StepId, WorkerId};
use crate::time::Time;

/// How one copy of a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Not finished yet.
    Running,
    /// Its result was the first and went to the master.
    Delivered,
    /// Another copy answered first; this result was dropped.
    Discarded,
    /// Its worker was lost before it answered.
    Lost,
}

/// One copy of a step given to one worker.
#[derive(Clone, Debug)]
pub struct RunRecord {
    step: StepId,
    cycle: Option<CycleId>,
    worker: WorkerId,
    host: HostId,
    speed: Option<f64>,
    assigned: Time,
    end: Option<Time>,
    cpu: Duration,
    wall: Duration,
    outcome: RunOutcome,
}

impl RunRecord {
    /// A copy assigned at `now`.
    pub fn new(
        step: StepId,
        cycle: Option<CycleId>,
        worker: WorkerId,
        host: HostId,
        speed: Option<f64>,
        now: Time,
    ) -> RunRecord {
        RunRecord {
            step,
            cycle,
            worker,
            host,
            speed,
            assigned: now,
            end: None,
            cpu: Duration::ZERO,
            wall: Duration::ZERO,
            outcome: RunOutcome::Running,
        }
    }

    /// When the copy was sent to its worker.
    pub fn assigned(&self) -> Time {
        self.assigned
    }

    /// The step this copy computes.
    pub fn step(&self) -> StepId {
        self.step
    }

    /// The copy answered.
    pub fn finish(&mut self, now: Time, cpu: Duration, wall: Duration, outcome: RunOutcome) {
        self.end = Some(now);
        self.cpu = cpu;
        self.wall = wall;
        self.outcome = outcome;
    }

    /// Whether this is a copy of `step` on `worker` closed as lost: a late
    /// answer from a worker the run already let go of is matched to it.
    pub fn is_lost_copy(&self, worker: WorkerId, step: StepId) -> bool {
        self.worker == worker && self.step == step && self.outcome == RunOutcome::Lost
    }

    /// The copy ended without an answer.
    pub fn close(&mut self, now: Time, outcome: RunOutcome) {
        if self.end.is_none() {
            self.end = Some(now);
            self.outcome = outcome;
        }
    }
}

/// One host's stay in the run.
#[derive(Clone, Debug)]
pub struct HostRecord {
    host: HostId,
    class: String,
    added: Time,
    removed: Option<Time>,
    lost: bool,
    /// Suspended periods; the last may still be open.
    pub suspended: Vec<(Time, Option<Time>)>,
}

impl HostRecord {
    /// A host granted at `now`.
    pub fn new(host: HostId, class: &str, now: Time) -> HostRecord {
        HostRecord {
            host,
            class: class.to_string(),
            added: now,
            removed: None,
            lost: false,
            suspended: Vec::new(),
        }
    }

    /// When the host was granted, when it left (`None`: still held) and
    /// whether it was taken rather than released.
    pub fn stay(&self) -> (Time, Option<Time>, bool) {
        (self.added, self.removed, self.lost)
    }

    /// The host left the run at `now`; `lost` if it was taken rather than released.
    pub fn end(&mut self, now: Time, lost: bool) {
        if self.removed.is_none() {
            self.removed = Some(now);
            self.lost = lost;
            if let Some(p) = self.suspended.last_mut()
                && p.1.is_none()
            {
                p.1 = Some(now);
            }
        }
    }
}

/// The summary of a run; serializes to JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Wall time from the start of the run to `complete`, seconds.
    pub execution_time_s: f64,
    /// Host time allocated to the run, summed over hosts, seconds.
    pub occupancy_s: f64,
    /// CPU time the workers measured around every step copy, seconds.
    pub cpu_time_s: f64,
    /// CPU time of the copies whose result was delivered, seconds.
    pub useful_cpu_time_s: f64,
    /// Host time spent computing steps (every copy's wall time), summed
    /// over hosts, seconds. Absent (0) in statistics written before it was kept.
    #[serde(default)]
    pub busy_time_s: f64,
    /// The paper's efficiency: `busy_time_s / occupancy_s`, the share of
    /// the allocated host time spent on steps (0 when nothing was allocated).
    /// Statistics written before `busy_time_s` existed hold the CPU
    /// efficiency here.
    pub efficiency: f64,
    /// `cpu_time_s / occupancy_s`: lower than [`Stats::efficiency`] when
    /// steps wait (I/O, sleeps) or share their host's CPU.
    #[serde(default)]
    pub cpu_efficiency: f64,
    /// Hosts granted, lost and retired (their keys stay at the top level of
    /// the JSON).
    #[serde(flatten)]
    pub hosts: HostCounts,
    /// Step results delivered to the master.
    pub steps_delivered: u64,
    /// Step copies given to workers (more than delivered when steps were re-sent).
    pub step_copies: u64,
    /// Every copy of every step.
    pub steps: Vec<StepTime>,
    /// One row per host stay.
    pub timeline: Vec<HostTimeline>,
    /// When each cycle began and ended (the timeline's cycle boundaries).
    pub cycles: Vec<CycleTime>,
    /// Benchmark steps run on new workers (their keys stay at the top level
    /// of the JSON).
    #[serde(flatten)]
    pub benchmarks: SpeedBenchmarks,
    /// Each step's learned estimate at the end (work on a speed-1 host,
    /// seconds, and the observations behind it), sorted by step id: what a
    /// later run of the same application could start from.
    #[serde(default)]
    pub history: Vec<crate::plan::SavedEstimate>,
}

/// The hosts of a run, part of [`Stats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCounts {
    /// Hosts granted to the run.
    #[serde(rename = "hosts_added")]
    pub added: u32,
    /// Hosts taken away before the run released them.
    #[serde(rename = "hosts_lost")]
    pub lost: u32,
    /// Hosts fast abort retired (given back and excluded from the run's class).
    #[serde(rename = "hosts_retired", default)]
    pub retired: u32,
    /// Times the pool granted a retired host again anyway (given straight
    /// back): 0 when CARMI honours the exclusion.
    #[serde(default)]
    pub retired_offers: u32,
}

/// The speed benchmarks of a run, part of [`Stats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeedBenchmarks {
    /// Benchmark steps run on new workers to measure host speed.
    #[serde(rename = "speed_benchmarks", default)]
    pub count: u32,
    /// Host time they took (part of the occupancy, none of the steps' CPU
    /// time), seconds.
    #[serde(rename = "speed_benchmark_s", default)]
    pub host_s: f64,
}

/// One cycle's boundaries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleTime {
    /// The cycle.
    pub cycle: CycleId,
    /// When the master began it, seconds since the start.
    pub begin_s: f64,
    /// When the master ended it, if it did.
    pub end_s: Option<f64>,
}

/// Timing of one copy of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    /// The step.
    pub step: StepId,
    /// Its cycle, if the master uses cycles.
    pub cycle: Option<CycleId>,
    /// The worker.
    pub worker: WorkerId,
    /// The worker's host.
    pub host: HostId,
    /// The host's relative speed, when known.
    pub speed: Option<f64>,
    /// When it was sent, seconds since the start.
    pub assigned_s: f64,
    /// When it answered or was given up, seconds since the start.
    pub end_s: Option<f64>,
    /// Worker-measured CPU time, seconds.
    pub cpu_s: f64,
    /// Worker-measured wall time, seconds.
    pub wall_s: f64,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// The kind of a timeline period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeriodKind {
    /// The host belonged to the run.
    Allocated,
    /// Its owner was using it; the worker was stopped.
    Suspended,
    /// The worker was computing a step.
    Busy,
    /// The host was taken away (a zero-length mark at the time of loss).
    Lost,
}

/// One period on a host's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Period {
    /// What the host was doing.
    pub kind: PeriodKind,
    /// Start, seconds since the start of the run.
    pub start_s: f64,
    /// End, seconds since the start of the run.
    pub end_s: f64,
}

/// One host's row of the timeline (the data behind the paper's Figure 9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostTimeline {
    /// The host.
    pub host: HostId,
    /// Its class.
    pub class: String,
    /// Its periods, allocated first, then suspended, busy and lost ones.
    pub periods: Vec<Period>,
}

impl Stats {
    /// Summarizes the records as of `now`; periods still open end at `now`.
    pub fn compute(runs: &[RunRecord], hosts: &[HostRecord], now: Time) -> Stats {
        let s = |t: Time| t.as_secs_f64();
        let mut stats = Stats {
            execution_time_s: s(now),
            hosts: HostCounts {
                added: hosts.len() as u32,
                lost: hosts.iter().filter(|h| h.lost).count() as u32,
                ..HostCounts::default()
            },
            step_copies: runs.len() as u64,
            ..Stats::default()
        };
        let mut rows: Vec<HostTimeline> = hosts
            .iter()
            .map(|h| {
                let end = h.removed.unwrap_or(now);
                stats.occupancy_s += s(end.saturating_sub(h.added));
                let mut periods = vec![Period {
                    kind: PeriodKind::Allocated,
                    start_s: s(h.added),
                    end_s: s(end),
                }];
                periods.extend(h.suspended.iter().map(|(a, b)| Period {
                    kind: PeriodKind::Suspended,
                    start_s: s(*a),
                    end_s: s(b.unwrap_or(end)),
                }));
                if h.lost {
                    periods.push(Period {
                        kind: PeriodKind::Lost,
                        start_s: s(end),
                        end_s: s(end),
                    });
                }
                HostTimeline {
                    host: h.host,
                    class: h.class.clone(),
                    periods,
                }
            })
            .collect();
        let mut by_host: HashMap<HostId, Vec<usize>> = HashMap::new();
        for (i, h) in hosts.iter().enumerate() {
            by_host.entry(h.host).or_default().push(i);
        }
        for r in runs {
            stats.cpu_time_s += s(r.cpu);
            if r.outcome == RunOutcome::Delivered {
                stats.useful_cpu_time_s += s(r.cpu);
                stats.steps_delivered += 1;
            }
            let end = r.end.unwrap_or(now);
            // The worker measured the compute itself; with prefetching the
            // step may have waited in its queue after being assigned.
            let start = if r.wall.is_zero() {
                r.assigned
            } else {
                end.saturating_sub(r.wall).max(r.assigned)
            };
            // The latest stay of the host that began before the step: a host
            // id may come back to the run after being lost (or given back).
            // Its stays are in the order they began, so a binary search finds
            // it: a scan of every stay for every copy was quadratic in the run.
            let stays = by_host.get(&r.host).map_or(&[][..], Vec::as_slice);
            let before = stays.partition_point(|&i| hosts[i].added <= r.assigned);
            if let Some(row) = before.checked_sub(1).map(|k| &mut rows[stays[k]]) {
                row.periods.push(Period {
                    kind: PeriodKind::Busy,
                    start_s: s(start),
                    end_s: s(end),
                });
            }
            stats.steps.push(StepTime {
                step: r.step,
                cycle: r.cycle,
                worker: r.worker,
                host: r.host,
                speed: r.speed,
                assigned_s: s(r.assigned),
                end_s: r.end.map(s),
                cpu_s: s(r.cpu),
                wall_s: s(r.wall),
                outcome: r.outcome,
            });
        }
        stats.busy_time_s = stats.steps.iter().map(|s| s.wall_s).sum();
        if stats.occupancy_s > 0.0 {
            stats.efficiency = stats.busy_time_s / stats.occupancy_s;
            stats.cpu_efficiency = stats.cpu_time_s / stats.occupancy_s;
        }
        stats.timeline = rows;
        stats
    }
}

/// A snapshot of a run's hosts and steps, for progress displays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Hosts allocated to the run (suspended ones included).
    pub hosts: u32,
    /// Of those, hosts whose owner is back (the worker is stopped).
    pub suspended: u32,
    /// Hosts whose worker is computing a step.
    pub busy: u32,
    /// Hosts whose worker is starting (spawned, not connected yet).
    pub starting: u32,
    /// Hosts the run would like to hold (the sum over its classes).
    pub wanted: u32,
    /// Steps waiting for a worker.
    pub queued: u32,
    /// Steps handed to a worker and not answered yet (copies count once).
    pub running: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_keys_stay_at_the_top_of_the_json_and_old_files_still_read() {
        let mut stats = Stats::default();
        stats.hosts.added = 3;
        stats.hosts.retired_offers = 1;
        stats.benchmarks.count = 2;
        let json: serde_json::Value = serde_json::to_value(&stats).unwrap();
        assert_eq!(json["hosts_added"], 3);
        assert_eq!(json["retired_offers"], 1);
        assert_eq!(json["speed_benchmarks"], 2);
        assert!(json.get("hosts").is_none() && json.get("benchmarks").is_none());
        let back: Stats = serde_json::from_value(json).unwrap();
        assert_eq!(back, stats);
        // Written before retirement and speed benchmarks were counted.
        let old = r#"{"execution_time_s": 1.0, "occupancy_s": 2.0, "cpu_time_s": 0.5,
            "useful_cpu_time_s": 0.5, "efficiency": 0.25, "hosts_added": 4, "hosts_lost": 1,
            "steps_delivered": 7, "step_copies": 8, "steps": [], "timeline": [], "cycles": []}"#;
        let old: Stats = serde_json::from_str(old).unwrap();
        assert_eq!(
            (old.hosts.added, old.hosts.lost, old.hosts.retired),
            (4, 1, 0)
        );
        assert_eq!(old.benchmarks.count, 0);
    }
}
