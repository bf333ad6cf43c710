//! What the run does with its workers: connections (and the benchmark step
//! a new one may run first), results and errors, and the loss grace of a
//! dropped connection.

use std::time::Duration;

use bytes::Bytes;
use carmi_proto::msg::ExitStatus;
use tracing::{info, warn};

use super::{Output, Queued, Run, Timer};
use crate::ids::{StepId, WorkerId};
use crate::proto::{FromWorker, ToMaster, ToWorker};
use crate::sched::{LossCause, Ticket, Verdict};
use crate::speed::{BENCHMARK_STEP, BENCHMARK_TICKET};
use crate::time::Time;

impl Run {
    /// Worker `worker` connected (its hello proved the run's token). `false`:
    /// it is no live worker of this run, and the driver closes the connection.
    pub fn worker_connected(&mut self, worker: WorkerId, now: Time) -> bool {
        self.set_now(now);
        let Some(host) = self.sched.find_worker_host(worker) else {
            warn!("{worker} connected but is not a live worker of this run");
            return false;
        };
        // Init and cycle data go out with its first step (`switch_context`).
        self.workers.connected.insert(worker);
        self.workers.early_deaths = 0;
        info!("{worker} joined");
        let t = self.t();
        if self.speeds.worker_connected(worker, host, t) {
            self.send_benchmark(worker);
        } else {
            self.sched.worker_joined(worker, t);
        }
        true
    }

    /// Worker `worker`'s connection dropped. It gets no steps until it is
    /// back; if it is not back within the loss grace, it counts as crashed
    /// (unless its host was deleted meanwhile, which is then the cause).
    pub fn worker_dropped(&mut self, worker: WorkerId, now: Time) {
        self.set_now(now);
        if !self.workers.connected.remove(&worker) {
            return;
        }
        let t = self.t();
        self.sched.worker_detached(worker, t);
        self.loss_grace(worker);
    }

    /// Starts the loss grace of a worker without a connection.
    pub(super) fn loss_grace(&mut self, worker: WorkerId) {
        let due = self.clock.now + self.cfg.loss_grace;
        self.timers.push((due, Timer::LossDue(worker)));
    }

    /// The loss grace of `worker` ended. Unless it is back, it is lost, and
    /// what the pool said of its process decides whether the step it was
    /// computing is charged: an exit on a host still the run's is a crash;
    /// a lost host is not the step's fault; with nothing said yet, the
    /// charge waits for the pool's word ([`Run::process_exited`]).
    pub(super) fn loss_due(&mut self, worker: WorkerId, t: Time) {
        if self.workers.connected.contains(&worker) {
            return;
        }
        self.speeds.worker_gone(worker);
        let exit = self.workers.exits.remove(&worker);
        let Some(host) = self.sched.find_worker_host(worker) else {
            return;
        };
        match exit {
            Some(ExitStatus::HostLost) => {
                info!("{worker} is gone with its lost host");
                self.sched.worker_lost(worker, LossCause::HostGone, t);
            }
            Some(status) => {
                info!("{worker} exited ({status:?}) and did not come back: counted as crashed");
                self.sched.worker_lost(worker, LossCause::Crashed, t);
            }
            None => {
                info!(
                    "{worker} lost its connection and the pool has not said why: its step is \
                     charged only if the pool reports that its process died"
                );
                if let Some(ticket) = self.sched.worker_vanished(worker, t) {
                    self.workers.unexplained.insert(worker, (host, ticket));
                }
            }
        }
    }

    /// A message from worker `worker` (its payload beside it).
    pub fn worker_message(&mut self, worker: WorkerId, msg: FromWorker, payload: Bytes, now: Time) {
        self.set_now(now);
        if self.workers.disowned.contains(&worker) {
            info!("{worker}, whose host was lost, answered after all: dropped");
            return;
        }
        let t = self.t();
        match msg {
            FromWorker::Result {
                ticket,
                cpu_us,
                wall_us,
            } => {
                let cpu = Duration::from_micros(cpu_us);
                let wall = Duration::from_micros(wall_us);
                if ticket == BENCHMARK_TICKET {
                    let took = self.sched.learned_time(cpu, wall);
                    self.benchmark_answered(worker, Some(took));
                    return;
                }
                let ticket = Ticket(ticket);
                // Every copy's time says how fast its host is; the speed is
                // corrected before the history learns from it.
                let expect = self
                    .tickets
                    .steps
                    .get(&ticket)
                    .and_then(|(_, step)| self.speeds.expect(&self.sched, worker, *step));
                if let Some(exp) = expect {
                    let took = self.sched.learned_time(cpu, wall);
                    self.speeds.observe_result(&mut self.sched, exp, took);
                }
                let verdict = self.sched.result(worker, ticket, cpu, wall, t);
                if verdict == Verdict::Deliver {
                    self.tickets.data.remove(&ticket);
                    if let Some((m, step)) = self.tickets.steps.remove(&ticket) {
                        self.tell_master(m, ToMaster::Result { step }, payload);
                    }
                }
            }
            FromWorker::Error { ticket, message } => {
                if ticket == BENCHMARK_TICKET {
                    warn!("{worker}: the speed benchmark failed: {message}");
                    self.benchmark_answered(worker, None);
                    return;
                }
                self.sched.step_error(worker, Ticket(ticket), &message, t);
            }
        }
    }

    /// Sends the benchmark step to a worker that just connected (with the
    /// init data of the master that registered it).
    fn send_benchmark(&mut self, worker: WorkerId) {
        if let Some(m) = self.workers.bench_master {
            let switch = self.switch_context(worker, m);
            self.outbox
                .queue
                .extend(switch.into_iter().map(Queued::Out));
        }
        let data = self.speeds.benchmark().cloned().unwrap_or_default();
        self.outbox.queue.push_back(Queued::Out(Output::ToWorker {
            worker,
            msg: ToWorker::Step {
                ticket: BENCHMARK_TICKET,
                step: StepId(BENCHMARK_STEP),
            },
            payload: data,
        }));
    }

    /// The benchmark's answer: the host's speed is set, and the worker is
    /// given to the scheduler for real steps.
    fn benchmark_answered(&mut self, worker: WorkerId, took: Option<Duration>) {
        let t = self.t();
        if self.speeds.benchmark_done(&mut self.sched, worker, took, t) {
            if let Some(took) = took {
                info!("{worker} ran the speed benchmark in {took:?}");
            }
            self.sched.worker_joined(worker, t);
        }
    }
}
