//! The router: everything the global RM decides, as a pure state machine over
//! decoded messages. It owns the [`Allocator`], the machine registry (host ids,
//! heartbeat deadlines, which connection reaches which machine) and the
//! [`ProcTable`], and turns each input into [`Output`]s: messages to send on
//! a connection, connections to close.
//!
//! # Call order
//! The driver calls one input at a time, each with the current time (time
//! only moves forward):
//! - [`Router::on_link_opened`] after a successful handshake,
//! - [`Router::on_decoded`] for each decoded frame, its ad already checked
//!   and parsed by [`Decoded::new`] off the router's task (or
//!   [`Router::on_message`], which does both), except `Upload` and `Fetch`,
//!   whose bytes the driver stores and serves itself, reporting a stored
//!   executable with [`Router::on_executable_stored`]. `now` is when the
//!   frame was received, so a machine's liveness does not depend on how
//!   soon the router got to its heartbeat,
//! - [`Router::on_link_closed`] when a connection ends,
//! - [`Router::on_tick`] when [`Router::next_deadline`] has passed and every
//!   input received before then has been handed over (a machine is lost for
//!   its own silence, not because its heartbeats waited in the router's inbox),
//!
//! then sends what [`Router::take_outputs`] returns, in order (an
//! [`Output::Journal`] record is on disk before anything after it goes out),
//! and arms one timer at the new [`Router::next_deadline`]. Before the first
//! input, [`Router::recover`] replays the journal of an earlier run.
//!
//! A machine's connection dropping does not make it lost: its local RM keeps
//! its processes and reconnects. Only silence for `missed_heartbeats`
//! heartbeat periods does.
//!
//! # Parts
//! [`Router`] is a thin dispatcher over its parts, each a struct owning its
//! state, with the files of the decisions about it beneath its own file:
//! - `registry` (`Registry`): connections, machines' presence and
//!   deadlines; `registry/machines.rs` (advertise, heartbeat, loss),
//!   `registry/tick.rs` (the loss clock and the cut-off), `registry/absent.rs`.
//! - `jobs` (`Jobs`): submitted and hand-started jobs, their masters;
//!   `jobs/admin.rs` (submit, rm, q), `jobs/master.rs`, `jobs/anywhere.rs`,
//!   `jobs/requeue.rs`, `jobs/hold.rs`, `jobs/checkpoint.rs`, `jobs/enforce.rs`.
//! - `requests` (`Requests`): what waits for a process or a
//!   machine; `requests/dispatch.rs` (application requests),
//!   `requests/outstanding.rs` (across a restart), `requests/spec_api.rs`.
//! - `reports` (`Reports`): history, event logs, `carmi logs` reads.
//! - `authz` (`Access`): what each connection's token lets it do.
//! - `pilots` (`Pilots`): the allocation queues and their dry runs.
//!
//! The router itself keeps the configuration, the clock, the [`Allocator`],
//! the [`ProcTable`], the executable store's index and the outputs. What a
//! part decides alone is its own method (`Registry::ready_link`,
//! `Jobs::master_on`, `Access::forget_link`); a decision that needs several
//! parts, the allocator or the outputs is a `Router` method in the file of
//! the part it is mostly about, reaching the others through their fields
//! (`self.registry.ready_link(..)`).
//! Across parts: `lifecycle.rs` (processes starting, exiting, attaching,
//! events delivered), `gone.rs`, `join.rs`, `share.rs`, `stored.rs`, and
//! `recover.rs` (the journal replayed into every part).
//!
//! # One request's path
//! An application's `AddHosts`, forwarded by its local RM: [`Router::on_decoded`]
//! finds the link a machine's (`registry`), proves the machine alive
//! (`registry/tick.rs`'s `touch`) and hands the `Forward` to
//! `requests/dispatch.rs`, which finds the process attached at that
//! connection (the [`ProcTable`]), checks the request against its limits,
//! gives it to the [`Allocator`] and journals it as outstanding
//! (`requests/outstanding.rs`). The allocator's effects (hosts granted, or
//! the request left waiting) become events for the process in
//! `lifecycle.rs`'s `flush` and `deliver`, sent on the link of the machine
//! it is attached through (`registry`), or kept (`requests`) while
//! that machine is away; [`Router::take_outputs`] hands them to the driver.

use std::fmt;
use std::time::Duration;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{FromGlobal, Role, ToGlobal};
use tracing::{debug, warn};

use crate::alloc::Allocator;
use crate::procs::ProcTable;
use registry::LinkRole;

pub use ads::{
    Decoded, MAX_AD_ATTRIBUTES, MAX_AD_BYTES, MAX_NEW_NAMES_PER_CONNECTION, NameAllowance,
    count_attributes,
};

mod ads;
mod authz;
mod check;
mod config;
mod gone;
mod jobs;
mod join;
mod lifecycle;
mod pilots;
mod recover;
mod registry;
mod reports;
mod requests;
mod share;
mod stored;

pub use crate::bounds::{ENDED_LOGS, EVENTS_PER_JOB, HISTORY_LIMIT};
pub use config::{PERIODIC_EXPR_INTERVAL, RouterConfig};
pub(crate) use lifecycle::new_proc;
pub use registry::{CUT_OFF_LIMIT, CUT_OFF_MIN_MACHINES};
pub use stored::{DEFAULT_STORE_KEEP, STORE_SWEEP_EVERY};

#[cfg(test)]
mod anywhere_tests;
#[cfg(test)]
mod authz_tests;
#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod enforce_tests;
#[cfg(test)]
mod gone_tests;
#[cfg(test)]
mod hand_tests;
#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod jobs_tests;
#[cfg(test)]
#[path = "router/logs_tests.rs"]
mod logs_tests;
#[cfg(test)]
mod master_restart_tests;
#[cfg(test)]
mod own_name_tests;
#[cfg(test)]
mod requeue_tests;
#[cfg(test)]
mod restart_gaps_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod stored_tests;
#[cfg(test)]
mod tests;

/// Most events kept for one unreachable process ([`Router::deliver`]); a
/// process that stays away longer than that many events loses the oldest.
pub const MAX_PARKED: usize = 4096;

/// One connection accepted by the global RM (a local RM or an admin tool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "l{}", self.0)
    }
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Send a message on a connection.
    Send {
        /// The connection.
        link: LinkId,
        /// The message.
        msg: FromGlobal,
    },
    /// Close a connection, logging why.
    Close {
        /// The connection.
        link: LinkId,
        /// Why, for the log.
        reason: String,
    },
    /// Append a record to the journal and fsync it before carrying out the
    /// outputs that follow (a submit is acknowledged only once it is on disk).
    Journal(crate::journal::Record),
    /// Delete the files master `process` sent back (from the store of
    /// returned files): its job's record is gone, or they were not wanted.
    DropFiles {
        /// The master.
        process: ProcessId,
    },
    /// Answer an admin's `FetchFiles` on `link` with these files, read from
    /// the store (or with a failure if they cannot be read).
    SendFiles {
        /// The admin connection.
        link: LinkId,
        /// The files and the master that sent them.
        files: carmi_proto::msg::JobFiles,
    },
    /// Copy a job's checkpoint (files its master sent back, in the store of
    /// returned files) into the executable store by content, and report
    /// with [`Router::on_checkpoint_saved`].
    SaveCheckpoint {
        /// The job.
        job: JobId,
        /// All the files its master sent back, as stored (by position),
        /// and the master; dropped from the store once copied.
        files: carmi_proto::msg::JobFiles,
        /// The names among them that make the checkpoint.
        names: Vec<String>,
    },
    /// Remove a file from the executable store: no live job refers to it
    /// and it was last used long ago (`router/stored.rs`).
    DropStored {
        /// Its hash.
        sha256: String,
    },
    /// Carry out an allocation queue's command with the batch system
    /// (`sbatch`, `scancel`, `squeue`), and report back with
    /// [`Router::on_pilot_submitted`] or [`Router::on_batch_states`].
    Pilot(crate::alloc_queue::QueueCommand),
}

/// The global RM's decisions. See the module documentation for the call
/// order, and its `# Parts` for what each field keeps.
pub struct Router {
    config: RouterConfig,
    now: Duration,
    alloc: Allocator,
    procs: ProcTable,
    /// Machines and connections: who is reachable, and when each is lost.
    registry: registry::Registry,
    /// Submitted and hand-started jobs, and their masters.
    jobs: jobs::Jobs,
    /// Requests and events waiting for a process or a machine.
    requests: requests::Requests,
    /// What admins read back: history, event logs, `carmi logs` reads.
    reports: reports::Reports,
    /// What each connection's token lets it do.
    access: authz::Access,
    /// The allocation queues and their dry runs.
    pilots: pilots::Pilots,
    /// The files of the executable store (`router/stored.rs`).
    stored: stored::StoredFiles,
    /// When users' usage was last journaled (`router/share.rs`).
    usage_journaled: Duration,
    out: Vec<Output>,
}

impl Router {
    /// A router with an empty pool.
    pub fn new(config: RouterConfig) -> Router {
        let mut alloc = Allocator::new();
        alloc.set_usage_half_life(config.priority_half_life);
        alloc.set_concurrency_limits(config.concurrency_limits.clone());
        alloc.set_unix_epoch(config.started_unix);
        Router {
            config,
            now: Duration::ZERO,
            alloc,
            procs: ProcTable::new(),
            registry: Default::default(),
            jobs: jobs::Jobs::new(),
            requests: Default::default(),
            reports: Default::default(),
            access: Default::default(),
            pilots: pilots::Pilots::new(),
            stored: Default::default(),
            usage_journaled: Duration::ZERO,
            out: Vec::new(),
        }
    }

    /// The next job id this router gives (for the driver's high-water mark).
    pub fn next_job_id(&self) -> u64 {
        self.jobs.next_job
    }

    /// Gives no job id below `floor` from now on: the driver's high-water
    /// mark, above every id given before, even those a cut journal forgot.
    pub fn raise_next_job(&mut self, floor: u64) {
        self.jobs.next_job = self.jobs.next_job.max(floor);
    }

    /// The allocator, for inspection.
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// The process table, for inspection.
    pub fn processes(&self) -> &ProcTable {
        &self.procs
    }

    /// What to send and close, in order, since the last call.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        self.journal_events();
        std::mem::take(&mut self.out)
    }

    /// When [`Router::on_tick`] must next be called, if ever.
    pub fn next_deadline(&self) -> Option<Duration> {
        [
            self.registry.next_deadline(),
            self.reports.log_reads.next_deadline(),
            self.pilots_deadline(),
            self.avoid_deadline(),
            self.policy_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn advance(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.alloc.advance_to(self.now);
    }

    fn send(&mut self, link: LinkId, msg: FromGlobal) {
        self.out.push(Output::Send { link, msg });
    }

    fn close(&mut self, link: LinkId, reason: String) {
        self.out.push(Output::Close { link, reason });
    }

    fn lost_after(&self) -> Duration {
        self.config
            .heartbeat
            .checked_mul(self.config.missed_heartbeats.max(1))
            .unwrap_or(Duration::MAX)
    }

    /// A new connection passed the handshake with `role`.
    pub fn on_link_opened(&mut self, link: LinkId, role: Role, now: Duration) {
        self.advance(now);
        match role {
            Role::Local { name } if name.trim().is_empty() => {
                self.close(link, "a local RM must give its machine a name".into());
            }
            Role::Local { name } if name.len() > carmi_proto::limits::MAX_NAME_BYTES => {
                let e = carmi_proto::limits::check_len(
                    "machine name",
                    &name,
                    carmi_proto::limits::MAX_NAME_BYTES,
                );
                self.close(link, e.err().map(|e| e.to_string()).unwrap_or_default());
            }
            Role::Local { name } => {
                let why = format!("machine `{name}` connected again on a newer connection");
                if let Some(old) = self.registry.connect(name, link) {
                    self.close(old, why);
                }
                self.settle_log_reads();
            }
            Role::Admin => {
                self.registry.links.insert(link, LinkRole::Admin);
            }
            Role::Application { .. }
            | Role::Peer { .. }
            | Role::Output { .. }
            | Role::Stager { .. }
            | Role::Relay { .. } => {
                self.close(
                    link,
                    "applications talk to their local RM, not to the global RM".into(),
                );
            }
        }
    }

    /// A connection ended.
    pub fn on_link_closed(&mut self, link: LinkId, now: Duration) {
        self.advance(now);
        let role = self.registry.links.remove(&link);
        self.access.forget_link(link);
        match role {
            Some(LinkRole::Machine(_)) => self.settle_log_reads(),
            Some(LinkRole::Admin) => self.forget_log_reads(link),
            None => {}
        }
        if let Some(LinkRole::Machine(name)) = role {
            self.registry.disconnected(&name, link);
        }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// A decoded message arrived on a connection: [`Router::on_decoded`]
    /// after parsing its ad here (tests, and drivers that do not mind).
    pub fn on_message(&mut self, link: LinkId, msg: ToGlobal, now: Duration) {
        let decoded = Decoded::new(msg, &self.config);
        self.on_decoded(link, decoded, now);
    }

    /// A message arrived on a connection at `now`, its ad (if any) checked
    /// and parsed by [`Decoded::new`].
    pub fn on_decoded(&mut self, link: LinkId, decoded: Decoded, now: Duration) {
        let Decoded { msg, ad } = decoded;
        self.advance(now);
        match self.registry.links.get(&link) {
            None => return,
            Some(LinkRole::Admin) => {
                if let Some(msg) = self.authorize(link, msg) {
                    self.on_admin(link, msg);
                }
            }
            Some(LinkRole::Machine(name)) => {
                let name = name.clone();
                self.touch(&name);
                let ad = ad.map(|ad| ad.and_then(|ad| ads::own_name(&name, ad)));
                self.on_machine(link, name, msg, ad);
            }
        }
        self.flush();
    }

    /// An admin's request, authorized.
    fn on_admin(&mut self, link: LinkId, msg: ToGlobal) {
        match msg {
            ToGlobal::Status => {
                let pool = self.alloc.pool_status();
                self.send(link, FromGlobal::Pool(pool));
            }
            ToGlobal::Submit(req) => self.submit(link, *req),
            ToGlobal::RemoveJob { job, cluster: true } => self.remove_cluster(link, job),
            ToGlobal::RemoveJob { job, .. } => self.remove_job(link, job),
            ToGlobal::Queue => self.queue(link),
            ToGlobal::Analyze { job } => self.analyze(link, job),
            ToGlobal::History { job } => self.history(link, job),
            ToGlobal::Hold {
                job,
                cluster,
                reason,
                user,
            } => match cluster {
                true => self.hold_cluster(link, job, reason, &user),
                false => self.hold(link, job, reason, &user),
            },
            ToGlobal::Release { job, cluster: true } => self.release_cluster(link, job),
            ToGlobal::Release { job, .. } => self.release(link, job),
            ToGlobal::Events { job, after } => self.job_events(link, job, after),
            ToGlobal::FetchFiles { job } => self.fetch_files(link, job),
            ToGlobal::Logs {
                job,
                stream,
                offset,
            } => self.read_log(link, job, stream, offset),
            ToGlobal::MachineAds => {
                let ads = self.alloc.machine_ads();
                self.send(link, FromGlobal::Ads(ads));
            }
            ToGlobal::Alloc(req) => self.alloc_request(link, req),
            ToGlobal::UserPrio(req) => self.user_prio(link, req),
            other => {
                let what = variant_name(&other);
                self.close(link, format!("admin connections may send Status, Submit, RemoveJob, Queue, Analyze, History, Hold, Release, Events, FetchFiles, Logs, MachineAds, Alloc and UserPrio, not {what}"));
            }
        }
    }

    /// A message from the local RM of machine `name`, its ad checked and
    /// parsed (and its name its own).
    fn on_machine(
        &mut self,
        link: LinkId,
        name: String,
        msg: ToGlobal,
        ad: Option<Result<classad::ClassAd, String>>,
    ) {
        match msg {
            ToGlobal::Advertise { slots, running, .. } => {
                let ad = ad.unwrap_or_else(|| Err("the machine ad is missing".into()));
                self.advertise(link, &name, ad, slots, running)
            }
            ToGlobal::Heartbeat { .. } => self.heartbeat(link, &name, ad),
            ToGlobal::AppAttach {
                conn,
                job,
                process,
                endpoint,
                token: _,
            } => {
                // The token was checked by the driver (`on_app_identity`).
                let (job, process) = self.sane_attach_ids(&name, job, process);
                self.app_attach(link, &name, conn, job, process, endpoint)
            }
            ToGlobal::AppDetach { conn } => self.app_detach(&name, conn),
            ToGlobal::Unanswered { conn, requests } => self.unanswered(&name, conn, requests),
            ToGlobal::Forward { conn, id, body } => self.forward(link, &name, conn, id, body),
            ToGlobal::Started { process, result } => {
                // Launching when its machine registered again, started since:
                // explained, not lost at the next heartbeat.
                if let Some(p) = self.registry.presence.get_mut(&name) {
                    p.suspects.retain(|&q| q != process);
                }
                self.on_started(&name, process, result);
            }
            ToGlobal::Exited {
                process,
                status,
                cpu_seconds,
                usage,
            } => self.exited(&name, process, (status, cpu_seconds), usage),
            ToGlobal::Vacating { process } => {
                if self.jobs.master_on(process, &name).is_some() {
                    self.jobs.vacating.insert(process);
                }
            }
            ToGlobal::SlotState { slot, state } => self.slot_state(&name, slot, state),
            ToGlobal::Leaving { reason } => self.leaving(link, &name, &reason),
            ToGlobal::MasterFiles { process, files } => self.master_files(&name, process, files),
            ToGlobal::LogRead { request, result } => self.log_read(&name, request, result),
            ToGlobal::Status => {
                let pool = self.alloc.pool_status();
                self.send(link, FromGlobal::Pool(pool));
            }
            ToGlobal::Upload { .. }
            | ToGlobal::Fetch { .. }
            | ToGlobal::StageServe { .. }
            | ToGlobal::Fetched { .. }
            | ToGlobal::StageStats => {
                debug!(%link, "executable transfer reached the router; the driver serves those");
            }
            // The connection's task keeps its token; it takes these.
            ToGlobal::TokenTaken { .. } | ToGlobal::CertifyMachine { .. } => {
                debug!(%link, "a token's or a key's message reached the router; the driver takes those");
            }
            ToGlobal::Submit(_)
            | ToGlobal::RemoveJob { .. }
            | ToGlobal::Queue
            | ToGlobal::Analyze { .. }
            | ToGlobal::History { .. }
            | ToGlobal::Hold { .. }
            | ToGlobal::Release { .. }
            | ToGlobal::Events { .. }
            | ToGlobal::FetchFiles { .. }
            | ToGlobal::Logs { .. }
            | ToGlobal::Tokens(_)
            | ToGlobal::Alloc(_)
            | ToGlobal::UserPrio(_)
            | ToGlobal::MachineAds => {
                let what = variant_name(&msg);
                warn!(
                    machine = name,
                    "{what} is an admin request; a local RM may not send it"
                );
            }
        }
    }

    /// A process on machine `name` exited: a held job's, a master (which
    /// ends its job, leaves a checkpoint or goes back to the queue), or a
    /// job's process.
    fn exited(
        &mut self,
        name: &str,
        process: ProcessId,
        (status, cpu_seconds): (carmi_proto::msg::ExitStatus, f64),
        usage: carmi_proto::msg::ProcessUsage,
    ) {
        if self.on_exit_usage(name, process, &status, cpu_seconds, usage) {
            // Held for going over its request: nothing more to do.
        } else if let Some(job) = self.jobs.master_on(process, name) {
            let vacated = self.jobs.vacating.remove(&process);
            let checkpoint = self
                .jobs
                .submitted
                .get(&job)
                .is_some_and(|s| jobs::leaves_checkpoint(&s.spec, &status, vacated));
            if checkpoint {
                let exit = (status, cpu_seconds);
                self.master_checkpointed((process, job), name, exit, vacated);
            } else if vacated {
                self.master_evicted(process, job, name, status, cpu_seconds);
            } else {
                self.exit_process(process, status.clone(), cpu_seconds);
                self.master_report(process, job, Err(status));
            }
        } else if self.runs_on(process, name) {
            self.exit_process(process, status, cpu_seconds);
        }
    }
}

/// The name of a message's variant, for logs and refusals.
pub fn variant_name(msg: &ToGlobal) -> &'static str {
    match msg {
        ToGlobal::Advertise { .. } => "Advertise",
        ToGlobal::Heartbeat { .. } => "Heartbeat",
        ToGlobal::AppAttach { .. } => "AppAttach",
        ToGlobal::AppDetach { .. } => "AppDetach",
        ToGlobal::Unanswered { .. } => "Unanswered",
        ToGlobal::Forward { .. } => "Forward",
        ToGlobal::Upload { .. } => "Upload",
        ToGlobal::Fetch { .. } => "Fetch",
        ToGlobal::StageServe { .. } => "StageServe",
        ToGlobal::Fetched { .. } => "Fetched",
        ToGlobal::StageStats => "StageStats",
        ToGlobal::Started { .. } => "Started",
        ToGlobal::Exited { .. } => "Exited",
        ToGlobal::Vacating { .. } => "Vacating",
        ToGlobal::SlotState { .. } => "SlotState",
        ToGlobal::Leaving { .. } => "Leaving",
        ToGlobal::Status => "Status",
        ToGlobal::Submit(_) => "Submit",
        ToGlobal::RemoveJob { .. } => "RemoveJob",
        ToGlobal::Queue => "Queue",
        ToGlobal::Analyze { .. } => "Analyze",
        ToGlobal::MachineAds => "MachineAds",
        ToGlobal::History { .. } => "History",
        ToGlobal::Hold { .. } => "Hold",
        ToGlobal::Release { .. } => "Release",
        ToGlobal::Events { .. } => "Events",
        ToGlobal::MasterFiles { .. } => "MasterFiles",
        ToGlobal::FetchFiles { .. } => "FetchFiles",
        ToGlobal::Logs { .. } => "Logs",
        ToGlobal::LogRead { .. } => "LogRead",
        ToGlobal::Tokens(_) => "Tokens",
        ToGlobal::Alloc(_) => "Alloc",
        ToGlobal::UserPrio(_) => "UserPrio",
        ToGlobal::TokenTaken { .. } => "TokenTaken",
        ToGlobal::CertifyMachine { .. } => "CertifyMachine",
    }
}
