//! A run's progress as job attributes (`SetJobAttrs`), so that the people
//! watching the pool (`carmi q --json`, the global RM's dashboard) see how
//! a WoDi run's cycles are going in the same place as its hosts, without
//! connecting to the run. Pure: built from the scheduler's [`Stats`] and
//! [`Status`]; the server sends the result when it changed.
//!
//! Every name starts with `Wodi`; values are ClassAd literals:
//! - `WodiCycle` (the cycle begun last; absent before the first),
//!   `WodiCyclesDone`;
//! - `WodiCycleDelivered` and `WodiCycleLeft` (steps of that cycle
//!   delivered, and queued or running now);
//! - `WodiStepsDelivered`, `WodiHosts`, `WodiBusy`, `WodiSuspended`,
//!   `WodiStarting`, `WodiEfficiency` (busy host time over held host time
//!   so far, steps still running counted up to now, unlike
//!   [`Stats::efficiency`], which counts a step once it answered);
//! - `WodiLastCycleS` (the last finished cycle's length) and `WodiStepRatio`
//!   (its steps' measured work over their history's estimate: 1 when the
//!   history foretold them; the estimate has learned from these very
//!   steps, so it leans towards 1);
//! - `WodiHostBusy`: `{{host, busy_s, held_s}, ...}` for the hosts held
//!   longest (at most [`MAX_HOSTS`]).

use std::collections::HashMap;

use crate::stats::{PeriodKind, RunOutcome, Stats, Status};

/// Most hosts listed in `WodiHostBusy` (a big run's list stays readable
/// and its attribute small).
pub const MAX_HOSTS: usize = 64;

/// The run's progress as `(name, ClassAd value)` pairs.
pub fn job_attrs(stats: &Stats, status: &Status) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut int = |name: &str, v: u64| out.push((name.to_string(), v.to_string()));
    int("WodiHosts", status.hosts.into());
    int("WodiBusy", status.busy.into());
    int("WodiSuspended", status.suspended.into());
    int("WodiStarting", status.starting.into());
    int("WodiStepsDelivered", stats.steps_delivered);
    let done = stats.cycles.iter().filter(|c| c.end_s.is_some()).count();
    int("WodiCyclesDone", done as u64);
    if let Some(current) = stats.cycles.last() {
        let delivered = (stats.steps.iter())
            .filter(|s| s.cycle == Some(current.cycle) && s.outcome == RunOutcome::Delivered)
            .count();
        int("WodiCycle", current.cycle.0);
        int("WodiCycleDelivered", delivered as u64);
        int("WodiCycleLeft", u64::from(status.queued + status.running));
    }
    let (busy, held) = busy_and_held(stats)
        .values()
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    let efficiency = if held > 0.0 { busy / held } else { 0.0 };
    out.push(("WodiEfficiency".into(), real(efficiency)));
    if let Some(last) = stats.cycles.iter().rev().find(|c| c.end_s.is_some()) {
        let length = last.end_s.unwrap_or(last.begin_s) - last.begin_s;
        out.push(("WodiLastCycleS".into(), real(length)));
        if let Some(ratio) = step_ratio(stats, last.cycle) {
            out.push(("WodiStepRatio".into(), real(ratio)));
        }
    }
    out.push(("WodiHostBusy".into(), host_busy(stats)));
    out
}

/// A real as a ClassAd literal with three decimals (always with a point, so
/// that it reads back as a real).
fn real(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "0.0".into()
    }
}

/// Measured work (wall time x host speed) of `cycle`'s delivered steps over
/// the history's estimates of the same steps, where both are known.
fn step_ratio(stats: &Stats, cycle: crate::ids::CycleId) -> Option<f64> {
    let estimate: HashMap<_, f64> = stats.history.iter().map(|e| (e.step, e.mean)).collect();
    let (mut measured, mut expected) = (0.0, 0.0);
    for s in &stats.steps {
        if s.cycle != Some(cycle) || s.outcome != RunOutcome::Delivered {
            continue;
        }
        if let (Some(speed), Some(&e)) = (s.speed, estimate.get(&s.step)) {
            measured += s.wall_s * speed;
            expected += e;
        }
    }
    (expected > 0.0).then(|| measured / expected)
}

/// Busy and held seconds of each host, over all its stays.
fn busy_and_held(stats: &Stats) -> HashMap<u64, (f64, f64)> {
    let mut by_host: HashMap<u64, (f64, f64)> = HashMap::new();
    for row in &stats.timeline {
        let e = by_host.entry(row.host.0).or_default();
        for p in &row.periods {
            let len = p.end_s - p.start_s;
            match p.kind {
                PeriodKind::Busy => e.0 += len,
                PeriodKind::Allocated => e.1 += len,
                _ => {}
            }
        }
    }
    by_host
}

/// `{{host, busy_s, held_s}, ...}` over every stay of each host, longest
/// held first.
fn host_busy(stats: &Stats) -> String {
    let mut rows: Vec<(u64, (f64, f64))> = busy_and_held(stats).into_iter().collect();
    rows.sort_by(|a, b| b.1.1.total_cmp(&a.1.1).then(a.0.cmp(&b.0)));
    rows.truncate(MAX_HOSTS);
    let items: Vec<String> = rows
        .iter()
        .map(|(h, (busy, held))| format!("{{{h}, {}, {}}}", real(*busy), real(*held)))
        .collect();
    format!("{{{}}}", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{CycleId, StepId, WorkerId};
    use crate::plan::SavedEstimate;
    use crate::stats::{CycleTime, HostTimeline, Period, StepTime};
    use carmi_proto::ids::HostId;

    fn step(step: u64, cycle: u64, wall: f64, outcome: RunOutcome) -> StepTime {
        StepTime {
            step: StepId(step),
            cycle: Some(CycleId(cycle)),
            worker: WorkerId(1),
            host: HostId(3),
            speed: Some(2.0),
            assigned_s: 0.0,
            end_s: Some(wall),
            cpu_s: wall,
            wall_s: wall,
            outcome,
        }
    }

    fn attr<'a>(attrs: &'a [(String, String)], name: &str) -> Option<&'a str> {
        attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_run_in_its_second_cycle_reports_where_it_stands() {
        let stats = Stats {
            steps_delivered: 3,
            efficiency: 0.8,
            cycles: vec![
                CycleTime {
                    cycle: CycleId(0),
                    begin_s: 1.0,
                    end_s: Some(11.0),
                },
                CycleTime {
                    cycle: CycleId(1),
                    begin_s: 11.0,
                    end_s: None,
                },
            ],
            steps: vec![
                step(0, 0, 2.0, RunOutcome::Delivered),
                step(1, 0, 3.0, RunOutcome::Delivered),
                step(1, 0, 9.0, RunOutcome::Discarded),
                step(0, 1, 2.0, RunOutcome::Delivered),
                step(1, 1, 1.0, RunOutcome::Running),
            ],
            history: vec![
                SavedEstimate {
                    step: StepId(0),
                    mean: 4.0,
                    samples: 2,
                },
                SavedEstimate {
                    step: StepId(1),
                    mean: 6.0,
                    samples: 1,
                },
            ],
            timeline: vec![HostTimeline {
                host: HostId(3),
                class: "w".into(),
                periods: vec![
                    Period {
                        kind: PeriodKind::Allocated,
                        start_s: 0.0,
                        end_s: 20.0,
                    },
                    Period {
                        kind: PeriodKind::Busy,
                        start_s: 1.0,
                        end_s: 16.0,
                    },
                ],
            }],
            ..Stats::default()
        };
        let status = Status {
            hosts: 1,
            busy: 1,
            queued: 2,
            running: 1,
            ..Status::default()
        };
        let a = job_attrs(&stats, &status);
        assert_eq!(attr(&a, "WodiCycle"), Some("1"));
        assert_eq!(attr(&a, "WodiCyclesDone"), Some("1"));
        assert_eq!(attr(&a, "WodiCycleDelivered"), Some("1"));
        assert_eq!(attr(&a, "WodiCycleLeft"), Some("3"));
        // 15 s busy of 20 s held, the running step counted.
        assert_eq!(attr(&a, "WodiEfficiency"), Some("0.750"));
        assert_eq!(attr(&a, "WodiLastCycleS"), Some("10.000"));
        // Cycle 0 delivered 2 s and 3 s at speed 2 against 4 + 6 estimated.
        assert_eq!(attr(&a, "WodiStepRatio"), Some("1.000"));
        assert_eq!(attr(&a, "WodiHostBusy"), Some("{{3, 15.000, 20.000}}"));
        for (name, value) in &a {
            assert!(classad::parse_expr(value).is_ok(), "{name} = {value}");
        }
    }

    #[test]
    fn a_run_before_its_first_cycle_says_only_what_it_has() {
        let a = job_attrs(&Stats::default(), &Status::default());
        assert_eq!(attr(&a, "WodiCycle"), None);
        assert_eq!(attr(&a, "WodiHostBusy"), Some("{}"));
        assert_eq!(attr(&a, "WodiHosts"), Some("0"));
    }
}
