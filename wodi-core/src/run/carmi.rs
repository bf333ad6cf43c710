//! What the run does with CARMI's events: hosts granted, suspended, resumed
//! and deleted, workers spawned and exiting, and requests failing, each
//! turned into an input of the scheduler.

use carmi_proto::ids::{HostId, ProcessId, RequestId};
use carmi_proto::msg::{Event, ExitStatus, FailureCode, Reply};
use tracing::{debug, info, warn};

use super::{CarmiCall, Purpose, Queued, Run, Timer};
use crate::time::Time;

impl Run {
    /// The connection to the local CARMI RM was lost: the masters are told
    /// (the run cannot get hosts any more).
    pub fn carmi_disconnected(&mut self, why: &str, now: Time) {
        self.set_now(now);
        self.fatal(&format!("lost the local CARMI RM: {why}"));
    }

    /// An event from CARMI.
    pub fn carmi_event(&mut self, event: Event, now: Time) {
        self.set_now(now);
        let t = self.t();
        match event {
            Event::HostsAdded { request, hosts, .. } => {
                let Some(class) = self.requests.host_requests.get(&request).cloned() else {
                    return;
                };
                let ids: Vec<HostId> = hosts.iter().map(|h| h.host).collect();
                let watch = self.call(CarmiCall::WatchHosts { hosts: ids }, None);
                self.outbox.queue.push_back(Queued::Out(watch));
                for h in hosts {
                    info!("host {} ({}) added to class {class}", h.host, h.name);
                    self.classes.host_class.insert(h.host, class.clone());
                    let need_ad =
                        self.speeds
                            .host_added(&mut self.sched, h.host, &h.name, &class, &h.ad, t);
                    if need_ad {
                        let info = self.call(
                            CarmiCall::GetHostInfo { host: h.host },
                            Some(Purpose::Info(h.host)),
                        );
                        self.outbox.queue.push_back(Queued::Out(info));
                    }
                }
            }
            Event::HostDeleted { host, reason, .. } => {
                info!("host {host} deleted: {reason}");
                self.speeds.host_gone(host);
                self.classes.host_class.remove(&host);
                // A worker lost on it without a reason was lost with it.
                self.workers.unexplained.retain(|_, (h, _)| *h != host);
                self.sched.host_lost(host, t);
            }
            Event::HostSuspended { host, .. } => self.sched.host_suspended(host, t),
            Event::HostResumed { host, .. } => self.sched.host_resumed(host, t),
            Event::ProcessStarted {
                request, process, ..
            } => {
                if let Some(worker) = self.requests.spawns.remove(&request) {
                    self.requests.processes.insert(process, worker);
                }
            }
            Event::ProcessExited {
                request,
                process,
                status,
                ..
            } => self.process_exited(request, process, status, now),
            Event::Failed { request, failure } => self.request_failed(request, failure),
            Event::Done {
                request,
                reply: Reply::Host(info),
            } => {
                if let Some(host) = self.requests.info_requests.remove(&request) {
                    self.speeds.host_ad(&mut self.sched, host, &info.ad);
                }
            }
            Event::Done { request, .. } => {
                self.requests.cancels.remove(&request);
                if let Some((host, class)) = self.requests.exclusions.remove(&request) {
                    info!("host {host} is excluded from class {class}");
                }
            }
        }
    }

    /// A CARMI request failed: what it was for decides what follows.
    fn request_failed(&mut self, request: RequestId, failure: carmi_proto::msg::Failure) {
        let t = self.t();
        if self.requests.cancelled.remove(&request) {
            // Withdrawn on purpose (the scheduler already stopped counting it).
            self.requests.host_requests.remove(&request);
            info!("host request {request} withdrawn: {}", failure.message);
            return;
        }
        if let Some(class) = self.requests.host_requests.remove(&request) {
            warn!("request for hosts of {class} failed: {}", failure.message);
            if failure.code == FailureCode::Unavailable {
                // Transient: asked again after the retry delay, not at the next tick.
                self.sched.hosts_unavailable(&class, u32::MAX, t);
                let due = self.clock.now + self.cfg.host_retry;
                self.timers.push((due, Timer::RetryHosts(class)));
                return;
            }
            self.sched.hosts_not_granted(&class, u32::MAX, t);
            self.fatal(&format!(
                "the pool refused hosts of class {class}: {}",
                failure.message
            ));
        } else if let Some(worker) = self.requests.spawns.remove(&request) {
            if failure.code == FailureCode::HostSuspended {
                // Not a crash: the scheduler spawns it again when the host resumes.
                info!("{worker} waits for its host to resume: {}", failure.message);
                self.sched.spawn_failed(worker, true, t);
                return;
            }
            if failure.code == FailureCode::NotYourHost {
                return self.host_refused(worker, &failure.message);
            }
            if failure.code == FailureCode::Unavailable {
                // Transient (a global RM restarting): not the worker's
                // crash, spawned again after the retry delay.
                warn!("spawning {worker} must wait: {}", failure.message);
                if self.sched.spawn_deferred(worker) {
                    let due = self.clock.now + self.cfg.host_retry;
                    self.timers.push((due, Timer::RetrySpawn(worker)));
                }
                return;
            }
            warn!("spawning {worker} failed: {}", failure.message);
            if failure.code == FailureCode::BadExecutable {
                // Every host would refuse it the same way.
                let reason = format!(
                    "the worker executable {} cannot be used: {}",
                    self.classes.executable, failure.message
                );
                self.fatal(&reason);
            }
            self.sched.spawn_failed(worker, false, t);
        } else if let Some((host, class)) = self.requests.exclusions.remove(&request) {
            // Not fatal: the scheduler gives the host back again whenever
            // the pool offers it (and counts it in the statistics).
            warn!(
                "the pool did not exclude host {host} from class {class}: {}",
                failure.message
            );
        } else if self.requests.cancels.remove(&request) {
            debug!("cancel {request} came too late: {}", failure.message);
        } else {
            warn!("CARMI request {request} failed: {}", failure.message);
        }
    }
}

impl Run {
    /// CARMI reports that a process of the run exited (or never started).
    fn process_exited(
        &mut self,
        request: RequestId,
        process: ProcessId,
        status: ExitStatus,
        now: Time,
    ) {
        let t = self.t();
        if let Some(worker) = self.requests.spawns.remove(&request) {
            // It never started (no `ProcessStarted`): the local RM
            // refused or could not start it.
            warn!("{worker} could not start: {status:?}");
            self.sched.spawn_failed(worker, false, t);
            return;
        }
        let Some(worker) = self.requests.processes.remove(&process) else {
            return;
        };
        info!("{worker} ({process}) exited: {status:?}");
        if let Some((_, ticket)) = self.workers.unexplained.remove(&worker) {
            // Lost through its grace with no reason given; this is the reason.
            if !pool_kill(&status) {
                info!("{worker} died on a host still ours: its step is charged");
                self.sched.charge_crash(ticket);
            }
            return;
        }
        if self.sched.find_worker_host(worker).is_some() {
            // Read when its loss grace ends.
            self.workers.exits.insert(worker, status.clone());
        }
        if status == ExitStatus::HostLost {
            // Its connection may stay open behind the partition: nothing it
            // sends later counts, and it is treated as if the connection had
            // dropped (the host's deletion, which comes with it, re-sends
            // its steps).
            self.workers.disowned.insert(worker);
            if self.workers.connected.contains(&worker) {
                self.worker_dropped(worker, now);
                return;
            }
        }
        // The connection's own loss (with its grace) decides; a worker that
        // never connected is lost here, after the same grace. Only a worker
        // the run still holds says something about the executable: one the
        // run let go of while it started (its host suspended past its grace)
        // is turned away when it connects and exits 0, and ten such in a row
        // under owner churn ended the run (the owner soak, `carmi-owner-bench
        // soak`).
        if !self.workers.connected.contains(&worker) {
            if self.sched.find_worker_host(worker).is_some() {
                self.early_death(&status);
            }
            self.loss_grace(worker);
        }
    }

    /// A spawn of `worker` was refused because its host is not the run's:
    /// the host leaves the run (no crash counted, no spawn retried on it)
    /// and its class is asked for again after the retry delay, not at once.
    fn host_refused(&mut self, worker: crate::ids::WorkerId, why: &str) {
        let t = self.t();
        let Some(host) = self.sched.find_worker_host(worker) else {
            return;
        };
        warn!(
            "the pool refused {worker} on host {host}, which it says is not ours ({why}); dropping the host"
        );
        self.speeds.host_gone(host);
        self.classes.host_class.remove(&host);
        if let Some(class) = self.sched.host_refused(host, t) {
            let due = self.clock.now + self.cfg.host_retry;
            self.timers.push((due, Timer::RetryHosts(class)));
        }
    }

    /// A worker's process exited before it connected: counts it, and ends
    /// the run once [`super::MAX_EARLY_DEATHS`] did so in a row.
    fn early_death(&mut self, status: &ExitStatus) {
        if pool_kill(status) {
            return;
        }
        self.workers.early_deaths += 1;
        if self.workers.early_deaths == super::MAX_EARLY_DEATHS {
            let reason = format!(
                "{} workers in a row exited before connecting to the WoDi server (the last: \
                 {status:?}); the worker command ({}) fails at start-up: its standard error \
                 is in `carmi logs` of the job",
                self.workers.early_deaths, self.classes.executable
            );
            self.fatal(&reason);
        }
    }
}

/// Whether a process's exit is the pool's own doing (a vacate's SIGTERM, the
/// grace's SIGKILL, a lost host): churn, which says nothing against the
/// worker executable or the step it was computing.
fn pool_kill(status: &ExitStatus) -> bool {
    matches!(
        status,
        ExitStatus::HostLost | ExitStatus::Signal(9) | ExitStatus::Signal(15)
    )
}
