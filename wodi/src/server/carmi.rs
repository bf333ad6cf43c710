//! What the server does with CARMI's events: hosts granted, suspended,
//! resumed and deleted, workers spawned and exiting, and requests failing,
//! each turned into an input of the core.
//!
//! Kept apart from `server.rs` (the event loop and the core's outputs) so
//! that each file stays readable.

use carmi_api::client::Incoming;
use carmi_api::ids::HostId;
use carmi_api::msg::{Event, FailureCode, Reply};
use tracing::{debug, info, warn};

use super::{Driver, Ev, HOST_RETRY};

impl Driver {
    /// An event from CARMI (or its connection ending), for the core.
    pub(super) fn on_carmi(&mut self, inc: Incoming) {
        let now = self.now();
        let event = match inc {
            Incoming::Rm(event) => event,
            Incoming::Disconnected(why) => {
                self.fatal(&format!("lost the local CARMI RM: {why}"));
                return;
            }
            // What workers print (a panic, a library's warning) is worth
            // seeing where the run was started: on this server's stderr,
            // which is the master's, each line marked with its worker.
            Incoming::Output { process, data, .. } => {
                let who = self
                    .processes
                    .get(&process)
                    .map_or_else(|| format!("process {process}"), |w| format!("worker {w}"));
                let text = String::from_utf8_lossy(&data);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    eprintln!("[{who}] {line}");
                }
                return;
            }
            _ => return,
        };
        match event {
            Event::HostsAdded { request, hosts, .. } => {
                let Some(class) = self.host_requests.get(&request).cloned() else {
                    return;
                };
                let ids: Vec<HostId> = hosts.iter().map(|h| h.host).collect();
                self.carmi.suspend_notify(&ids);
                self.carmi.resume_notify(&ids);
                self.carmi.delete_notify(&ids);
                for h in hosts {
                    info!("host {} ({}) added to class {class}", h.host, h.name);
                    let need_ad = self.speeds.host_added(
                        &mut self.sched,
                        h.host,
                        &h.name,
                        &class,
                        &h.ad,
                        now,
                    );
                    if need_ad {
                        let id = self.carmi.get_host_info(h.host);
                        self.info_requests.insert(id, h.host);
                    }
                }
            }
            Event::HostDeleted { host, reason, .. } => {
                info!("host {host} deleted: {reason}");
                self.speeds.host_gone(host);
                self.sched.host_lost(host, now);
            }
            Event::HostSuspended { host, .. } => self.sched.host_suspended(host, now),
            Event::HostResumed { host, .. } => self.sched.host_resumed(host, now),
            Event::ProcessStarted {
                request, process, ..
            } => {
                if let Some(worker) = self.spawns.remove(&request) {
                    self.processes.insert(process, worker);
                }
            }
            Event::ProcessExited {
                request,
                process,
                status,
                ..
            } => {
                if let Some(worker) = self.spawns.remove(&request) {
                    // It never started (no `ProcessStarted`): the local RM
                    // refused or could not start it.
                    warn!("{worker} could not start: {status:?}");
                    self.sched.spawn_failed(worker, false, now);
                } else if let Some(worker) = self.processes.remove(&process) {
                    info!("{worker} ({process}) exited: {status:?}");
                    // The connection's own loss (with its grace period) decides;
                    // a worker that never connected is lost here.
                    if !self.workers.contains_key(&worker) {
                        let tx = self.events_tx.clone();
                        let grace = self.loss_grace;
                        tokio::spawn(async move {
                            tokio::time::sleep(grace).await;
                            let _ = tx.send(Ev::LossDue(worker));
                        });
                    }
                }
            }
            Event::Failed { request, failure } => {
                if self.cancelled.remove(&request) {
                    // Withdrawn on purpose (the core already stopped counting it).
                    self.host_requests.remove(&request);
                    info!("host request {request} withdrawn: {}", failure.message);
                    return;
                }
                if let Some(class) = self.host_requests.remove(&request) {
                    warn!("request for hosts of {class} failed: {}", failure.message);
                    self.sched.hosts_not_granted(&class, u32::MAX, now);
                    if failure.code == FailureCode::Unavailable {
                        // Transient: the pool will serve the request again soon.
                        let tx = self.events_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(HOST_RETRY).await;
                            let _ = tx.send(Ev::RetryHosts(class));
                        });
                        return;
                    }
                    self.fatal(&format!(
                        "the pool refused hosts of class {class}: {}",
                        failure.message
                    ));
                } else if let Some(worker) = self.spawns.remove(&request) {
                    let suspended = failure.code == FailureCode::HostSuspended;
                    if suspended {
                        // Not a crash: the core spawns it again when the host resumes.
                        info!("{worker} waits for its host to resume: {}", failure.message);
                        self.sched.spawn_failed(worker, true, now);
                        return;
                    }
                    warn!("spawning {worker} failed: {}", failure.message);
                    if failure.code == FailureCode::BadExecutable {
                        // Every host would refuse it the same way.
                        self.fatal(&format!(
                            "the worker executable {} cannot be used: {}",
                            self.executable.display(),
                            failure.message
                        ));
                    }
                    self.sched.spawn_failed(worker, false, now);
                } else if let Some((host, class)) = self.exclusions.remove(&request) {
                    // Not fatal: the core gives the host back again whenever
                    // the pool offers it (and counts it in the statistics).
                    warn!(
                        "the pool did not exclude host {host} from class {class}: {}",
                        failure.message
                    );
                } else if self.cancels.remove(&request) {
                    debug!("cancel {request} came too late: {}", failure.message);
                } else {
                    warn!("CARMI request {request} failed: {}", failure.message);
                }
            }
            Event::Done {
                request,
                reply: Reply::Host(info),
            } => {
                if let Some(host) = self.info_requests.remove(&request) {
                    self.speeds.host_ad(&mut self.sched, host, &info.ad);
                }
            }
            Event::Done { request, .. } => {
                self.cancels.remove(&request);
                if let Some((host, class)) = self.exclusions.remove(&request) {
                    info!("host {host} is excluded from class {class}");
                }
            }
        }
    }
}
