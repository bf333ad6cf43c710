//! What the run does with its masters: connecting and leaving, init and
//! cycle data, steps submitted to the scheduler, history and statistics.

use std::time::Duration;

use bytes::Bytes;
use tracing::warn;

use super::{CarmiCall, Fewest, MasterId, MasterState, Queued, Run};
use crate::ids::StepId;
use crate::plan::{Hysteresis, SavedEstimate};
use crate::proto::{ClassSpec, FromMaster, Policies, ToMaster, ToWorker};
use crate::sched::{Sched, SchedConfig};
use crate::speed::HostSpeeds;
use crate::time::Time;

/// The fewest-hosts rule a master's policies ask for: the tolerance and,
/// per class, the count's hysteresis starting from the hosts asked for.
fn fewest_rule(policies: &Policies, classes: &[ClassSpec]) -> Option<Fewest> {
    let tolerance = policies.fewest_hosts?;
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        warn!("fewest_hosts tolerance {tolerance} is not a number >= 0: holding what was asked");
        return None;
    }
    let holds = classes
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                Hysteresis::new(
                    if policies.grow_first_cycle {
                        c.count.min(1)
                    } else {
                        c.count
                    },
                    policies.hysteresis,
                ),
            )
        })
        .collect();
    Some(Fewest {
        tolerance,
        patience: policies.hysteresis,
        holds,
        first_known: policies.grow_first_cycle.then_some(0),
        loss_aware: policies.loss_aware,
    })
}

/// A master's `Init`, as the run takes it apart.
struct Init {
    classes: Vec<ClassSpec>,
    executable: String,
    args: Vec<String>,
}

impl Run {
    /// A master connected; its messages are given with the id returned.
    pub fn master_connected(&mut self, now: Time) -> MasterId {
        self.set_now(now);
        let id = self.next_master;
        self.next_master += 1;
        self.masters.insert(id, MasterState::default());
        id
    }

    /// Master `m`'s connection ended (`why`, if it was not a clean close).
    /// Its steps are cancelled; the last master leaving ends the run.
    pub fn master_gone(&mut self, m: MasterId, why: Option<String>, now: Time) {
        self.set_now(now);
        if self.masters.get(&m).is_some_and(|c| !c.retired) {
            warn!(
                "master {m} went away before completing ({})",
                why.unwrap_or_else(|| "connection closed".into())
            );
        }
        self.retire(m);
        self.masters.remove(&m);
        if self.masters.is_empty() {
            self.finished = true;
        }
    }

    /// A message from master `m` (its payload beside it).
    pub fn master_message(&mut self, m: MasterId, msg: FromMaster, payload: Bytes, now: Time) {
        self.set_now(now);
        if !self.masters.contains_key(&m) {
            return;
        }
        match msg {
            FromMaster::Init {
                classes,
                executable,
                args,
                prefetch,
                prefetch_max,
                max_attempts,
                suspend_timeout_ms,
                ordering,
                speed,
                refine_speed,
                learn_from_wall,
                policies,
            } => {
                let init = Init {
                    classes,
                    executable,
                    args,
                };
                if !self.started {
                    let mut cfg = SchedConfig {
                        prefetch: prefetch.max(1),
                        prefetch_max,
                        max_attempts: max_attempts.max(1),
                        suspend_timeout: Duration::from_millis(suspend_timeout_ms),
                        learn_from_wall,
                        ..SchedConfig::default()
                    };
                    policies.apply(&mut cfg);
                    self.classes.fewest = fewest_rule(&policies, &init.classes);
                    self.sched = Sched::new(cfg, ordering.dispatch());
                    self.speeds = HostSpeeds::new(speed, refine_speed);
                    self.workers.bench_master = Some(m);
                    // The scheduler's time, and the statistics, start here.
                    self.clock.epoch = self.clock.now;
                    self.classes.executable = init.executable.clone();
                    self.classes.args = init.args.clone();
                    self.started = true;
                } else if let Some(reason) = self.command_conflict(&init) {
                    self.tell_master(m, ToMaster::Fatal { reason }, Bytes::new());
                    return;
                } else if init.executable != self.classes.executable
                    || init.args != self.classes.args
                {
                    // Shared workers run one executable; say so instead of guessing.
                    let reason = format!(
                        "this server's workers run {} {:?}, not {} {:?}",
                        self.classes.executable, self.classes.args, init.executable, init.args
                    );
                    self.tell_master(m, ToMaster::Fatal { reason }, Bytes::new());
                    return;
                }
                self.add_classes(m, init.classes, payload);
                self.tell_master(m, ToMaster::Ready, Bytes::new());
            }
            FromMaster::BeginCycle { cycle } => {
                let t = self.t();
                self.sched.begin_cycle(cycle, t);
                self.broadcast(Some(m), &ToWorker::BeginCycle { cycle }, &payload);
                if let Some(conn) = self.masters.get_mut(&m) {
                    conn.cycle = Some((cycle, payload));
                }
            }
            FromMaster::Step { step } => self.submit(m, step, payload),
            FromMaster::Benchmark => self.speeds.set_benchmark(payload),
            FromMaster::RestoreHistory => {
                match serde_json::from_slice::<Vec<SavedEstimate>>(&payload) {
                    Ok(saved) => crate::plan::restore(self.sched.history_mut(), &saved),
                    Err(e) => warn!("master {m} sent a history that does not parse: {e}"),
                }
            }
            FromMaster::GetHistory => {
                let saved = crate::plan::snapshot(self.sched.history());
                let json = serde_json::to_vec(&saved).expect("estimates serialize");
                self.tell_master(m, ToMaster::History, Bytes::from(json));
            }
            FromMaster::EndCycle { cycle } => {
                let t = self.t();
                self.sched.end_cycle(cycle, t);
                self.hold_fewest_hosts();
                self.broadcast(Some(m), &ToWorker::EndCycle { cycle }, &payload);
            }
            FromMaster::Complete => {
                self.retire(m);
                // Taken once the decisions of the retirement are carried out.
                self.outbox.queue.push_back(Queued::Stats(m));
            }
        }
    }

    /// Master `m`'s classes: each adds its count to the class's desired
    /// hosts (a class is defined in CARMI when first wanted).
    fn add_classes(&mut self, m: MasterId, classes: Vec<ClassSpec>, init: Bytes) {
        let t = self.t();
        let Some(conn) = self.masters.get_mut(&m) else {
            return;
        };
        conn.init = init;
        conn.classes
            .extend(classes.iter().map(|c| (c.name.clone(), c.count)));
        for ClassSpec {
            name,
            requirements,
            count,
            speed,
            executable,
            args,
        } in classes
        {
            self.speeds.set_class_speed(&name, speed);
            if let Some(s) = speed.filter(|s| s.is_finite() && *s > 0.0) {
                self.classes.declared_speeds.insert(name.clone(), s);
            }
            let command = (
                executable.unwrap_or_else(|| self.classes.executable.clone()),
                args.unwrap_or_else(|| self.classes.args.clone()),
            );
            self.classes.commands.entry(name.clone()).or_insert(command);
            let d = self.classes.desired.entry(name.clone()).or_default();
            let first = *d == 0;
            *d += count;
            let d = *d;
            let d = self.starting_count(d);
            if first {
                // Defined before the scheduler asks for its hosts.
                let define = CarmiCall::DefineClass {
                    name: name.clone(),
                    requirements,
                };
                let o = self.call(define, None);
                self.outbox.queue.push_back(Queued::Out(o));
            }
            self.sched.set_class(&name, d, t);
        }
    }

    /// Why a later master's classes cannot share this run's workers: a
    /// class it names already runs another worker command.
    fn command_conflict(&self, init: &Init) -> Option<String> {
        init.classes.iter().find_map(|c| {
            let (exe, args) = self.classes.commands.get(&c.name)?;
            let want_exe = c.executable.as_ref().unwrap_or(&init.executable);
            let want_args = c.args.as_ref().unwrap_or(&init.args);
            (want_exe != exe || want_args != args).then(|| {
                format!(
                    "class {}'s workers run {exe} {args:?} in this server, not {want_exe} {want_args:?}",
                    c.name
                )
            })
        })
    }

    /// A step of master `m` goes to the scheduler; its data is kept until a
    /// worker takes it.
    fn submit(&mut self, m: MasterId, step: StepId, data: Bytes) {
        let t = self.t();
        let cycle = self
            .masters
            .get(&m)
            .and_then(|c| c.cycle.as_ref())
            .map(|(c, _)| *c);
        if cycle.is_some() && self.classes.fewest.is_some() {
            self.tickets.cycle_steps.push(step);
        }
        let ticket = self.sched.submit(step, cycle, t);
        self.tickets.data.insert(ticket, data);
        self.tickets.steps.insert(ticket, (m, step));
    }
}
