//! The run's outputs in order: its own messages first, then the scheduler's
//! decisions turned into messages and CARMI requests, then the status.
//!
//! The scheduler's outputs are turned into the run's one at a time, when
//! polled, so that each sees the requests before it already issued (a
//! withdrawal names the host requests made so far) and the workers'
//! connections as they are then.

use bytes::Bytes;
use tracing::{info, warn};

use super::{CarmiCall, MasterId, Output, Purpose, Queued, Run};
use crate::ids::{StepId, WorkerId};
use crate::proto::{ToMaster, ToWorker, connect_arg};
use crate::sched::{Output as SchedOutput, Ticket};

impl Run {
    /// The next thing to do, or `None` when there is nothing left (until the
    /// next input). After an [`Output::Carmi`], call [`Run::issued`] first.
    pub fn poll_output(&mut self) -> Option<Output> {
        loop {
            if let Some(o) = self.outbox.ready.pop_front() {
                return Some(o);
            }
            if let Some(Queued::Out(_)) = self.outbox.queue.front() {
                let Some(Queued::Out(o)) = self.outbox.queue.pop_front() else {
                    unreachable!("checked above");
                };
                return Some(o);
            }
            // The queue is empty or waits for the scheduler's decisions to
            // be carried out before the statistics are taken.
            if let Some(o) = self.sched.poll_output() {
                self.convert(o);
                continue;
            }
            match self.outbox.queue.pop_front() {
                Some(Queued::Stats(m)) => {
                    return Some(self.stats_for(m));
                }
                Some(Queued::Out(o)) => return Some(o),
                None => {
                    if !std::mem::take(&mut self.status.check) {
                        return None;
                    }
                    self.send_status();
                }
            }
        }
    }

    /// Turns one of the scheduler's decisions into outputs (in `ready`).
    fn convert(&mut self, out: SchedOutput) {
        match out {
            SchedOutput::Assign {
                ticket,
                step,
                worker,
            } => self.assign(ticket, step, worker),
            SchedOutput::RequestHosts { class, count } => {
                let o = self.call(
                    CarmiCall::AddHosts {
                        class: class.clone(),
                        count,
                    },
                    Some(Purpose::Hosts(class)),
                );
                self.outbox.ready.push_back(o);
            }
            SchedOutput::CancelRequests { class } => self.cancel_host_requests(&class),
            SchedOutput::ExcludeHost { class, host } => {
                // Sent before the host's release (the next output), on the
                // same connection: by the time the host is free, the pool no
                // longer grants it to this class.
                info!("excluding host {host}, retired by fast abort, from class {class}");
                let o = self.call(
                    CarmiCall::ExcludeHosts {
                        class: class.clone(),
                        hosts: vec![host],
                    },
                    Some(Purpose::Exclude(host, class)),
                );
                self.outbox.ready.push_back(o);
            }
            SchedOutput::ReleaseHost { host } => {
                self.speeds.host_gone(host);
                self.classes.host_class.remove(&host);
                let o = self.call(CarmiCall::DelHosts { hosts: vec![host] }, None);
                self.outbox.ready.push_back(o);
            }
            SchedOutput::Spawn { host, worker } => {
                // Each class may run its own build of the worker.
                let (executable, mut args) = self.classes.command(host);
                args.push(connect_arg(&self.cfg.connect_addr, &self.cfg.token, worker));
                let request = CarmiCall::Spawn {
                    executable,
                    args,
                    host,
                };
                let o = self.call(request, Some(Purpose::Spawn(worker)));
                self.outbox.ready.push_back(o);
            }
            SchedOutput::StepFailed {
                ticket,
                step,
                reason,
            } => {
                self.tickets.data.remove(&ticket);
                if let Some((m, _)) = self.tickets.steps.remove(&ticket)
                    && self.masters.contains_key(&m)
                {
                    self.outbox.ready.push_back(Output::ToMaster {
                        master: m,
                        msg: ToMaster::StepFailed { step, reason },
                        payload: Bytes::new(),
                    });
                }
            }
        }
    }

    /// The scheduler gave `ticket` (a copy of `step`) to `worker`: the step
    /// goes out with the context of its master, if the worker is connected.
    fn assign(&mut self, ticket: Ticket, step: StepId, worker: WorkerId) {
        if !self.workers.connected.contains(&worker) {
            // Its connection dropped and its loss is not decided
            // yet: the step goes back to the core, not lost here.
            warn!("{worker} has no connection: {step} goes back to the queue");
            let t = self.t();
            self.sched.assign_failed(worker, ticket, t);
            return;
        }
        let data = self.tickets.data.get(&ticket).cloned().unwrap_or_default();
        if let Some((m, _)) = self.tickets.steps.get(&ticket).copied() {
            let switch = self.switch_context(worker, m);
            self.outbox.ready.extend(switch);
        }
        self.outbox.ready.push_back(Output::ToWorker {
            worker,
            msg: ToWorker::Step {
                ticket: ticket.0,
                step,
            },
            payload: data,
        });
    }

    /// Withdraws every host request of `class` not withdrawn yet. Hosts
    /// granted before the cancel arrives still come, as this class's, and
    /// the core judges them.
    fn cancel_host_requests(&mut self, class: &str) {
        let mut ids: Vec<_> = self
            .requests
            .host_requests
            .iter()
            .filter(|(_, c)| *c == class)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        for request in ids {
            if self.requests.cancelled.insert(request) {
                let o = self.call(CarmiCall::CancelRequest { request }, Some(Purpose::Cancel));
                self.outbox.ready.push_back(o);
            }
        }
    }

    /// Before a worker computes a step of master `m`, it gets `m`'s init data
    /// and current cycle data, unless it already holds them.
    pub(super) fn switch_context(&mut self, worker: WorkerId, m: MasterId) -> Vec<Output> {
        if self.workers.context.get(&worker) == Some(&m)
            || !self.workers.connected.contains(&worker)
        {
            return Vec::new();
        }
        let Some(conn) = self.masters.get(&m) else {
            return Vec::new();
        };
        let mut out = vec![Output::ToWorker {
            worker,
            msg: ToWorker::Init,
            payload: conn.init.clone(),
        }];
        if let Some((cycle, data)) = &conn.cycle {
            out.push(Output::ToWorker {
                worker,
                msg: ToWorker::BeginCycle { cycle: *cycle },
                payload: data.clone(),
            });
        }
        self.workers.context.insert(worker, m);
        out
    }

    /// The statistics answering master `m`'s `Complete` (even if it left
    /// meanwhile: its connection may still take them).
    fn stats_for(&mut self, m: MasterId) -> Output {
        let mut stats = self.sched.stats(self.t());
        stats.benchmarks.count = self.speeds.benchmarks;
        stats.benchmarks.host_s = self.speeds.benchmark_time.as_secs_f64();
        let json = serde_json::to_vec(&stats).expect("statistics serialize");
        Output::ToMaster {
            master: m,
            msg: ToMaster::Stats,
            payload: Bytes::from(json),
        }
    }

    /// Sends the run's [`Status`](crate::proto::Status) to every master if
    /// it changed, at most once per `status_every` (a change held back is
    /// sent when that time comes: [`Run::next_deadline`] says when).
    fn send_status(&mut self) {
        // Checked first: this runs after every batch of inputs, and the
        // snapshot walks every ticket of the run.
        let next = self.status.last.1 + self.cfg.status_every;
        if self.clock.now < next {
            self.status.due = Some(next);
            return;
        }
        let st = self.sched.status();
        if st == self.status.last.0 {
            return;
        }
        self.status.last = (st, self.clock.now);
        let masters: Vec<MasterId> = self.masters.keys().copied().collect();
        for m in masters {
            self.outbox.ready.push_back(Output::ToMaster {
                master: m,
                msg: ToMaster::Status(st),
                payload: Bytes::new(),
            });
        }
    }
}
