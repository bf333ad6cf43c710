//! What the server does with its masters' messages: init and cycle data,
//! steps submitted to the core, results and statistics sent back, and the
//! context a worker must hold before computing a master's step.
//!
//! Kept apart from `server.rs` (the event loop and the core's outputs) so
//! that each file stays readable.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::warn;

use super::{Driver, MasterId};
use crate::conn::Outgoing;
use crate::ids::{StepId, WorkerId};
use crate::proto::{ClassSpec, FromMaster, ToMaster, ToWorker};
use crate::sched::{Sched, SchedConfig, Ticket};
use crate::speed::HostSpeeds;

impl Driver {
    /// The step id of a ticket whose data is still held; forgets it.
    pub(super) fn step_of(&mut self, ticket: Ticket) -> Option<(MasterId, StepId)> {
        self.data.remove(&ticket);
        self.steps.remove(&ticket)
    }

    /// A message from master `m` (its payload beside it).
    pub(super) fn on_master(&mut self, m: MasterId, msg: FromMaster, payload: Bytes) {
        let now = self.now();
        match msg {
            FromMaster::Init {
                classes,
                executable,
                args,
                prefetch,
                max_attempts,
                suspend_timeout_ms,
                ordering,
                speed,
                refine_speed,
                learn_from_wall,
                policies,
            } => {
                if !self.started {
                    let mut cfg = SchedConfig {
                        prefetch: prefetch.max(1),
                        max_attempts: max_attempts.max(1),
                        suspend_timeout: Duration::from_millis(suspend_timeout_ms),
                        learn_from_wall,
                        ..SchedConfig::default()
                    };
                    policies.apply(&mut cfg);
                    let asked: u32 = classes.iter().map(|c| c.count).sum();
                    self.fewest = match (policies.fewest_hosts, classes.len()) {
                        (Some(tol), 1) if tol.is_finite() && tol >= 0.0 => Some((
                            tol,
                            crate::plan::Hysteresis::new(asked, policies.hysteresis),
                        )),
                        (Some(_), n) => {
                            warn!(
                                "fewest_hosts needs exactly one class, not {n}: holding what was asked"
                            );
                            None
                        }
                        _ => None,
                    };
                    self.sched = Sched::new(cfg, ordering.dispatch());
                    self.speeds = HostSpeeds::new(speed, refine_speed);
                    self.bench_master = Some(m);
                    self.start = Instant::now();
                    self.executable = PathBuf::from(executable);
                    self.args = args;
                    self.started = true;
                } else if std::path::Path::new(&executable) != self.executable || args != self.args
                {
                    // Shared workers run one executable; say so instead of guessing.
                    let reason = format!(
                        "this server's workers run {} {:?}, not {executable} {args:?}",
                        self.executable.display(),
                        self.args
                    );
                    self.to_master(m, &ToMaster::Fatal { reason }, Bytes::new());
                    return;
                }
                let now = self.now();
                let Some(conn) = self.masters.get_mut(&m) else {
                    return;
                };
                conn.init = payload;
                for ClassSpec {
                    name,
                    requirements,
                    count,
                    speed,
                } in classes
                {
                    self.speeds.set_class_speed(&name, speed);
                    conn.classes.push((name.clone(), count));
                    let d = self.desired.entry(name.clone()).or_default();
                    if *d == 0 {
                        self.carmi.define_class(name.clone(), requirements);
                    }
                    *d += count;
                    self.sched.set_class(&name, *d, now);
                }
                self.to_master(m, &ToMaster::Ready, Bytes::new());
            }
            FromMaster::BeginCycle { cycle } => {
                self.sched.begin_cycle(cycle, now);
                self.broadcast(Some(m), &ToWorker::BeginCycle { cycle }, &payload);
                if let Some(conn) = self.masters.get_mut(&m) {
                    conn.cycle = Some((cycle, payload));
                }
            }
            FromMaster::Step { step } => self.submit(m, step, payload, now),
            FromMaster::Benchmark => self.speeds.set_benchmark(payload),
            FromMaster::RestoreHistory => {
                match serde_json::from_slice::<Vec<crate::checkpoint::SavedEstimate>>(&payload) {
                    Ok(saved) => crate::checkpoint::restore(self.sched.history_mut(), &saved),
                    Err(e) => warn!("master {m} sent a history that does not parse: {e}"),
                }
            }
            FromMaster::GetHistory => {
                let saved = crate::checkpoint::snapshot(self.sched.history());
                let json = serde_json::to_vec(&saved).expect("estimates serialize");
                self.to_master(m, &ToMaster::History, Bytes::from(json));
            }
            FromMaster::EndCycle { cycle } => {
                self.sched.end_cycle(cycle, now);
                self.hold_fewest_hosts(now);
                self.broadcast(Some(m), &ToWorker::EndCycle { cycle }, &payload);
            }
            FromMaster::Complete => {
                self.retire(m, now);
                self.flush_outputs();
                let mut stats = self.sched.stats(now);
                stats.speed_benchmarks = self.speeds.benchmarks;
                stats.speed_benchmark_s = self.speeds.benchmark_time.as_secs_f64();
                let json = serde_json::to_vec(&stats).expect("statistics serialize");
                self.to_master(m, &ToMaster::Stats, Bytes::from(json));
            }
        }
    }

    /// A step of master `m` goes to the core; its data is kept until a worker takes it.
    pub(super) fn submit(&mut self, m: MasterId, step: StepId, data: Bytes, now: Duration) {
        let cycle = self
            .masters
            .get(&m)
            .and_then(|c| c.cycle.as_ref())
            .map(|(c, _)| *c);
        // The core's assignments are carried out after this returns, so the
        // data is in place before any worker is sent the step.
        if cycle.is_some() && self.fewest.is_some() {
            self.cycle_steps.push(step);
        }
        let ticket = self.sched.submit(step, cycle, now);
        self.data.insert(ticket, data);
        self.steps.insert(ticket, (m, step));
    }

    /// Before a worker computes a step of master `m`, it gets `m`'s init data
    /// and current cycle data, unless it already holds them.
    pub(super) fn switch_context(&mut self, worker: WorkerId, m: MasterId) {
        if self.context.get(&worker) == Some(&m) {
            return;
        }
        let (Some(w), Some(conn)) = (self.workers.get(&worker), self.masters.get(&m)) else {
            return;
        };
        let _ = w
            .writer
            .send(Outgoing::new(&ToWorker::Init, conn.init.clone()));
        if let Some((cycle, data)) = &conn.cycle {
            let _ = w.writer.send(Outgoing::new(
                &ToWorker::BeginCycle { cycle: *cycle },
                data.clone(),
            ));
        }
        self.context.insert(worker, m);
    }
}
