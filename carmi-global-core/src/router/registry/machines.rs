//! Machines at the router: registration and reconciliation of what a
//! reconnecting local RM still runs, heartbeats, loss, and owner-policy slot
//! changes (when a machine is lost for its silence is in `tick.rs`). Ads and
//! updates over the limits are refused with their reason, told to the
//! machine and logged at most once per [`REFUSAL_LOG_PERIOD`].

use std::collections::BTreeSet;
use std::time::Duration;

use carmi_proto::ids::{HostId, JobId, ProcessId};
use carmi_proto::msg::{ExitStatus, Failure, FailureCode, FromGlobal, ProcessState, SlotActivity};
use classad::ClassAd;
use tracing::{debug, info, warn};

use crate::router::{LinkId, Output, Router};

/// Least time between two log lines about one machine's refused updates.
pub const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Characters of a leaving machine's reason kept for logs and events.
const MAX_LEAVING_REASON: usize = 200;

impl Router {
    /// Machine `name` advertised on `link`: it registers (again), hears
    /// its host ids first, and what it still runs is reconciled with what
    /// the router knows.
    pub(in crate::router) fn advertise(
        &mut self,
        link: LinkId,
        name: &str,
        ad: Result<ClassAd, String>,
        slots: u32,
        running: Vec<ProcessId>,
    ) {
        if slots > self.config.max_slots {
            let reason = format!(
                "machine `{name}` advertised {slots} slots; at most {} are accepted",
                self.config.max_slots
            );
            return self.close(link, reason);
        }
        let ad = match ad {
            Ok(ad) => ad,
            Err(e) => {
                let reason = format!("machine `{name}`: {e}");
                self.tell_refused(link, &reason);
                return self.close(link, reason);
            }
        };
        let hosts = self.register(name, ad, slots);
        info!(machine = name, slots, "machine registered");
        // The answer first: a local RM may expect it before anything else.
        self.send(
            link,
            FromGlobal::Registered {
                hosts: hosts.clone(),
                heartbeat_ms: self
                    .config
                    .heartbeat
                    .as_millis()
                    .try_into()
                    .unwrap_or(u64::MAX),
            },
        );
        let running: BTreeSet<ProcessId> = running.into_iter().collect();
        self.kill_unknown(link, name, &hosts, &running);
        self.send_waiting_masters(link, name);
        self.place_masters();
        self.reclaim_recovered(link, name, &running);
        self.suspect_missing(name, &hosts, &running);
        self.expect_announcements(name);
    }

    /// Registers machine `name` with the allocator (journaling host ids it
    /// did not have) and arms its deadline; returns its hosts.
    fn register(&mut self, name: &str, ad: ClassAd, slots: u32) -> Vec<HostId> {
        let known = self.alloc.known_hosts(name).len();
        self.pilot_registered(name, &ad);
        let hosts = self.alloc.on_machine_registered(name, ad, slots);
        if hosts.len() > known {
            self.out
                .push(Output::Journal(crate::journal::Record::Machine {
                    name: name.to_string(),
                    hosts: self.alloc.known_hosts(name).to_vec(),
                }));
        }
        let deadline = self.now.saturating_add(self.lost_after());
        self.registry.register(name, deadline);
        hosts
    }

    /// Kills what the local RM of `name` says still runs there but the
    /// router no longer knows (neither a live process on its hosts nor its master).
    fn kill_unknown(
        &mut self,
        link: LinkId,
        name: &str,
        hosts: &[HostId],
        running: &BTreeSet<ProcessId>,
    ) {
        for &p in running {
            let known = self
                .procs
                .find(p)
                .is_some_and(|pr| pr.is_live() && pr.host.is_some_and(|h| hosts.contains(&h)))
                || self.jobs.master_on(p, name).is_some();
            if !known {
                debug!(machine = name, process = %p, "killing a process the global RM no longer knows");
                self.send(link, FromGlobal::Kill { process: p });
            }
        }
    }

    /// Sends the masters that waited for machine `name` to come back, if its
    /// owner lets them start (else they wait among the unplaced).
    fn send_waiting_masters(&mut self, link: LinkId, name: &str) {
        let waiting: Vec<(ProcessId, JobId)> = self
            .jobs
            .masters
            .iter()
            .filter(|(p, (_, m))| m == name && !self.jobs.sent_masters.contains(p))
            .map(|(&p, &(j, _))| (p, j))
            .collect();
        for (p, j) in waiting {
            // Its owner may have come back while it was away.
            if self
                .jobs
                .submitted
                .get(&j)
                .is_some_and(|s| self.may_place(name, s))
            {
                self.send_master(link, p, j);
            } else {
                self.jobs.unplaced.insert(p);
            }
        }
    }

    /// Processes recovered from the journal that still run on `name` get
    /// their hosts back, and those whose `Started` was in flight when the
    /// global RM died are taken as started.
    fn reclaim_recovered(&mut self, link: LinkId, name: &str, running: &BTreeSet<ProcessId>) {
        for &p in running {
            if let Some((job, class)) = self.jobs.recovered.remove(&p)
                && let Some(host) = self.procs.find(p).and_then(|pr| pr.host)
                && !self.alloc.recover_claim(host, job, &class, p)
            {
                warn!(machine = name, process = %p, "its host went to another job meanwhile; killing it");
                self.send(link, FromGlobal::Kill { process: p });
                self.exit_process(p, ExitStatus::HostLost, 0.0);
            }
            // Its `Started` was in flight when the global RM died (no
            // `Running` record): it runs, so its spawner is told now.
            if self
                .procs
                .find(p)
                .is_some_and(|pr| pr.state == ProcessState::Starting && pr.host.is_some())
            {
                self.started(name, p, Ok(()));
            }
            // A master whose `Started` was in flight likewise.
            if let Some(job) = self.jobs.master_on(p, name)
                && self
                    .procs
                    .find(p)
                    .is_some_and(|pr| pr.state == ProcessState::Starting)
            {
                self.master_report(p, job, Ok(()));
            }
        }
    }

    /// What `name`'s hosts ran, its masters and the hand-started roots that
    /// ran there, missing from what it says still runs: settled at its next
    /// heartbeat.
    fn suspect_missing(&mut self, name: &str, hosts: &[HostId], running: &BTreeSet<ProcessId>) {
        // Processes it no longer runs most likely ended while it was away:
        // their `Exited` follows `Registered` from its backlog, with the real
        // status. Whatever is still unexplained at its next heartbeat (sent
        // after the backlog) was lost.
        let mut suspects: Vec<ProcessId> = hosts
            .iter()
            .flat_map(|&h| self.procs.live_on(h))
            .filter(|p| !running.contains(p))
            .collect();
        // Masters sent to it earlier run outside its slots.
        suspects.extend(
            self.jobs
                .masters
                .iter()
                .filter(|(p, (_, m))| {
                    m == name && self.jobs.sent_masters.contains(p) && !running.contains(p)
                })
                .map(|(&p, _)| p),
        );
        // Hand-started roots from the journal that ran here: their local RM
        // announces them again right after `Registered`.
        suspects.extend(
            self.jobs
                .awaiting_roots
                .iter()
                .filter(|(_, (_, m))| m == name)
                .map(|(&p, _)| p),
        );
        if let Some(p) = self.registry.presence.get_mut(name) {
            p.suspects = suspects;
        }
    }

    pub(in crate::router) fn heartbeat(
        &mut self,
        link: LinkId,
        name: &str,
        update: Option<Result<ClassAd, String>>,
    ) {
        self.settle_unannounced(name);
        let suspects = self
            .registry
            .presence
            .get_mut(name)
            .map(|p| std::mem::take(&mut p.suspects))
            .unwrap_or_default();
        for p in suspects {
            if let Some((job, _)) = self.jobs.awaiting_roots.remove(&p) {
                warn!(machine = name, %job, process = %p, "the hand-started root process of the job did not come back with its machine; the job ends");
                self.end_job(job);
            } else if let Some(job) = self.jobs.master_on(p, name) {
                if self
                    .procs
                    .find(p)
                    .is_some_and(|pr| pr.state == ProcessState::Starting)
                {
                    // Never reported started, not running, no exit in the
                    // backlog: its `SpawnMaster` never arrived (it died with
                    // a killed global RM or a broken link). Sent again; a
                    // local RM still launching it ignores the copy.
                    warn!(machine = name, %job, process = %p, "the master's machine does not have it; sending it again");
                    self.jobs.sent_masters.remove(&p);
                    self.send_master(link, p, job);
                } else {
                    // The local RM restarted without it: the master is gone.
                    self.master_lost(p, job);
                }
            } else if self.runs_on(p, name) {
                self.exit_process(p, ExitStatus::HostLost, 0.0);
            }
        }
        match update {
            None => {}
            Some(Ok(ad)) => match self.merged_over_limit(name, &ad) {
                // The heartbeat still proves the machine alive; only its update is dropped.
                Some(why) => {
                    let reason = format!("machine `{name}`: {why}; the update is ignored");
                    self.tell_refused(link, &reason);
                    self.log_refusal(name, &reason);
                }
                None => {
                    self.alloc.on_machine_updated(name, &ad);
                    if !self.jobs.unplaced.is_empty() {
                        self.place_masters();
                    }
                }
            },
            // The heartbeat still proves the machine alive; only its update is dropped.
            Some(Err(e)) => {
                let reason = format!("machine `{name}`: {e}; the update is ignored");
                self.tell_refused(link, &reason);
                self.log_refusal(name, &reason);
            }
        }
    }

    /// Why merging `update` into machine `name`'s ad would break the limits
    /// of one ad (`max_ad_attributes`, `max_ad_bytes`): each update is
    /// checked alone as it arrives, and without this a machine sending new
    /// names in every heartbeat grew its ad, and the global RM, without
    /// bound (issue 38).
    fn merged_over_limit(&self, name: &str, update: &ClassAd) -> Option<String> {
        let (attrs, bytes) = self.alloc.merged_size(name, update)?;
        let c = &self.config;
        if attrs > c.max_ad_attributes {
            return Some(format!(
                "the merged machine ad would have {attrs} attributes; at most {} are accepted (max_ad_attributes)",
                c.max_ad_attributes
            ));
        }
        (bytes > c.max_ad_bytes).then(|| {
            format!(
                "the merged machine ad would be {bytes} bytes long; at most {} are accepted (max_ad_bytes)",
                c.max_ad_bytes
            )
        })
    }

    /// Tells a local RM why what it sent was refused, as a failure naming
    /// the limit or the parse error (its log shows it).
    fn tell_refused(&mut self, link: LinkId, reason: &str) {
        let failure = Failure {
            code: FailureCode::Invalid,
            message: reason.to_string(),
        };
        self.send(link, FromGlobal::AdminFailed(failure));
    }

    /// Logs a refused update of machine `name` at most once per
    /// [`REFUSAL_LOG_PERIOD`], with how many were refused in between: a
    /// machine repeating a bad update every heartbeat writes one line per
    /// period, not one per heartbeat.
    fn log_refusal(&mut self, name: &str, reason: &str) {
        match self
            .registry
            .note_refusal(name, self.now, REFUSAL_LOG_PERIOD)
        {
            None => {}
            Some(0) => warn!(machine = name, "{reason}"),
            Some(quiet) => warn!(
                machine = name,
                "{reason} ({quiet} more refused since the last such line)"
            ),
        }
    }

    /// Machine `name` says on `link` that it goes away for good (its local
    /// RM is stopping and about to kill its processes): it is lost now, not
    /// a loss window later, so that its jobs hear that their hosts are gone
    /// before their processes' exits could tell them otherwise. A message on
    /// a link that is no longer the machine's (a newer connection took over)
    /// only closes that link.
    pub(in crate::router) fn leaving(&mut self, link: LinkId, name: &str, reason: &str) {
        // The reason comes from the network: a bounded, single-line excerpt.
        let reason: String = reason
            .chars()
            .take(MAX_LEAVING_REASON)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if !self.registry.is_current(name, link) {
            self.registry.links.remove(&link);
            return self.close(link, format!("machine `{name}` is leaving ({reason})"));
        }
        self.machine_lost(name, format!("machine `{name}` is leaving ({reason})"));
    }

    pub(in crate::router) fn machine_lost(&mut self, name: &str, reason: String) {
        warn!(machine = name, "{reason}; declaring it lost");
        // A job whose master ran there has lost its master: it ends, or
        // starts a new one elsewhere (below, once this machine is offline).
        let masters: Vec<(ProcessId, JobId)> = self
            .jobs
            .masters
            .iter()
            .filter(|(_, (_, m))| m == name)
            .map(|(&p, &(j, _))| (p, j))
            .collect();
        let mut restart = Vec::new();
        for (p, j) in masters {
            if self.jobs.submitted.get(&j).is_some_and(|s| s.anywhere) {
                restart.push((p, j));
            } else {
                self.exit_process(p, ExitStatus::HostLost, 0.0);
                self.master_report(p, j, Err(ExitStatus::HostLost));
            }
        }
        for h in self.alloc.machine_hosts(name).to_vec() {
            for p in self.procs.live_on(h) {
                self.exit_process(p, ExitStatus::HostLost, 0.0);
            }
        }
        self.alloc.on_machine_lost(name);
        self.pilot_lost(name);
        for (p, j) in restart {
            self.master_lost(p, j);
        }
        self.hold_newly_impossible();
        // Jobs hear about it before the connection goes.
        self.flush();
        if let Some(link) = self.registry.unregister(name) {
            self.close(link, reason);
        }
        self.settle_log_reads();
    }

    pub(in crate::router) fn slot_state(&mut self, name: &str, slot: u32, state: SlotActivity) {
        let Some(host) = self.alloc.host_of_slot(name, slot) else {
            warn!(
                machine = name,
                slot, "state change for a slot the machine did not advertise"
            );
            return;
        };
        if state == SlotActivity::Vacated {
            // The local RM killed them; whatever it reports later is old news.
            for p in self.procs.live_on(host) {
                self.exit_process(p, ExitStatus::HostLost, 0.0);
            }
        }
        self.alloc.on_slot_state(name, slot, state);
        let (from, to) = match state {
            SlotActivity::Suspended => (ProcessState::Running, ProcessState::Suspended),
            SlotActivity::Available => (ProcessState::Suspended, ProcessState::Running),
            SlotActivity::Vacated => return,
        };
        for p in self.procs.live_on(host) {
            if self.procs.find(p).is_some_and(|pr| pr.state == from) {
                self.procs.set_state(p, to.clone());
            }
        }
    }
}
