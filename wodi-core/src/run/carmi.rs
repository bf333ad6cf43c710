//! What the run does with CARMI's events: hosts granted, suspended, resumed
//! and deleted, workers spawned and exiting, and requests failing, each
//! turned into an input of the scheduler.

use carmi_proto::ids::HostId;
use carmi_proto::msg::{Event, FailureCode, Reply};
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
            } => {
                if let Some(worker) = self.requests.spawns.remove(&request) {
                    // It never started (no `ProcessStarted`): the local RM
                    // refused or could not start it.
                    warn!("{worker} could not start: {status:?}");
                    self.sched.spawn_failed(worker, false, t);
                } else if let Some(worker) = self.requests.processes.remove(&process) {
                    info!("{worker} ({process}) exited: {status:?}");
                    if status == carmi_proto::msg::ExitStatus::HostLost {
                        // Its connection may stay open behind the
                        // partition: nothing it sends later counts, and it
                        // is treated as if the connection had dropped (the
                        // host's deletion, which comes with it, re-sends
                        // its steps).
                        self.workers.disowned.insert(worker);
                        if self.workers.connected.contains(&worker) {
                            self.worker_dropped(worker, now);
                            return;
                        }
                    }
                    // The connection's own loss (with its grace) decides; a
                    // worker that never connected is lost here, after the
                    // same grace. Only a worker the run still holds says
                    // something about the executable: one the run let go of
                    // while it started (its host suspended past its grace)
                    // is turned away when it connects and exits 0, and ten
                    // such in a row under owner churn ended the run (the
                    // owner soak, `carmi-owner-bench soak`).
                    if !self.workers.connected.contains(&worker) {
                        if self.sched.find_worker_host(worker).is_some() {
                            self.early_death(&status);
                        }
                        self.loss_grace(worker);
                    }
                }
            }
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
    fn request_failed(
        &mut self,
        request: carmi_proto::ids::RequestId,
        failure: carmi_proto::msg::Failure,
    ) {
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
    fn early_death(&mut self, status: &carmi_proto::msg::ExitStatus) {
        use carmi_proto::msg::ExitStatus as S;
        // The pool's own kills (a vacate's SIGTERM, the grace's SIGKILL, a
        // lost host) are churn, not a broken worker.
        if matches!(status, S::HostLost | S::Signal(9) | S::Signal(15)) {
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
