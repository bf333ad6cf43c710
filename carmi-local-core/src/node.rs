//! The local RM's decisions, with no I/O: which message goes where, what is
//! kept while the global RM is away, when a process may be started.
//!
//! # Call order
//! The driver feeds inputs (`on_*` methods) as they happen and, after each,
//! carries out the [`Effect`]s from [`Core::take_effects`] in order. Inputs:
//! - the global link: [`Core::on_global_connected`] (after the handshake),
//!   [`Core::on_global`] for each message, [`Core::on_global_lost`] with the
//!   messages the link had not written;
//! - applications: [`Core::on_app_connected`], [`Core::on_app_request`],
//!   [`Core::on_app_upload`], [`Core::on_app_closed`];
//! - processes: [`Core::on_cache_miss`] or [`Core::on_launched`] after an
//!   [`Effect::Launch`], [`Core::on_stored`] after an [`Effect::Store`],
//!   [`Core::on_exited`];
//! - time: [`Core::on_time`] before every input and at [`Core::next_deadline`]
//!   (the kill grace's end, the next heartbeat, the owner policy's next
//!   step); the heartbeat's update as [`Core::on_heartbeat`] after an
//!   [`Effect::Heartbeat`];
//! - the owner policy: [`Core::step_policy`] whenever [`Core::policy_due`]
//!   says so after an input or a deadline (the core applies the policy's
//!   effects itself), or by hand
//!   [`Core::set_accepting`], [`Core::suspend_all`],
//!   [`Core::resume_all`], [`Core::open_all`], [`Core::close_all`],
//!   [`Core::vacate_all`], [`Core::kill_all`]; per slot [`Core::suspend_slot`],
//!   [`Core::resume_slot`].
//!
//! # While the global RM is away
//! Processes keep running. Process starts and exits, and executable uploads,
//! are kept in a backlog and sent, in order, once the new connection is
//! registered; the advertisement lists the processes still running. Requests
//! from applications fail at once with `Unavailable` (their caller may retry),
//! and every application connection is announced again (`AppAttach` with the
//! ids it was given) because a restarted global RM does not know it.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    ExecutableRef, FromGlobal, FromLocal, LogChunk, OutputRoute, Request, SlotActivity,
    StageSource, StdStream, ToGlobal,
};

/// Something for the driver to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Write a message (and its payload) to the global RM.
    ToGlobal(ToGlobal, Bytes),
    /// Write a message to an application connection.
    ToApp(ConnId, FromLocal),
    /// Close an application connection once what was written to it is
    /// sent (its job ended); the core has forgotten it already.
    CloseApp(ConnId),
    /// Start a process: look its executable up in the cache and launch it
    /// (answer with [`Core::on_launched`]), or report [`Core::on_cache_miss`].
    Launch(Launch),
    /// Verify and store an executable's bytes (answer with [`Core::on_stored`]).
    Store {
        /// What the bytes must be (as the spawn asked for, not as the sender claims).
        executable: ExecutableRef,
        /// The bytes.
        payload: Bytes,
    },
    /// Fetch an executable over a staging connection into the cache
    /// (answer with [`Core::on_fetched`]).
    FetchFrom {
        /// What to fetch (as the spawn asked for).
        executable: ExecutableRef,
        /// Where from (the global RM's answer to `Fetch`).
        source: StageSource,
    },
    /// Terminate a process's group: SIGTERM (and SIGCONT, so that a stopped
    /// group acts on it) now; if it has not exited when the kill grace is
    /// over, the core asks for [`Effect::KillNow`] (a deadline of the core,
    /// see [`Core::next_deadline`]).
    Kill(ProcessId),
    /// Stop a process's group.
    Suspend(ProcessId),
    /// Continue a process's group.
    Resume(ProcessId),
    /// Vacate: SIGTERM (and SIGCONT, so that a stopped group acts on it) to
    /// a process's group; SIGKILL comes from the policy ([`Effect::KillNow`]).
    Terminate(ProcessId),
    /// SIGKILL to a process's group now.
    KillNow(ProcessId),
    /// Heartbeat time: sample the machine's dynamic attributes and answer
    /// with [`Core::on_heartbeat`].
    Heartbeat,
    /// The machine has had no registration with the global RM for the
    /// orphan limit ([`Core::set_orphan_limit`]): the daemon stops (kills
    /// its processes and exits), so that a pilot whose global RM stays away
    /// ends instead of holding its batch allocation until the limit.
    Orphaned {
        /// Seconds since the last registration ended (or the start).
        away_s: f64,
    },
    /// Read a process's standard output or error for `carmi logs` (answer
    /// with [`Core::on_log_read`]).
    ReadLog {
        /// The global RM's number for the request.
        request: u64,
        /// The process.
        process: ProcessId,
        /// Its job (where its output is kept once it exited).
        job: JobId,
        /// Which stream.
        stream: StdStream,
        /// First byte wanted.
        offset: u64,
        /// The file its submit file named for that stream (else the sandbox's).
        path: Option<String>,
    },
}

/// A process to start, with everything the launcher needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The process.
    pub process: ProcessId,
    /// Its job.
    pub job: JobId,
    /// The slot's host id.
    pub host: HostId,
    /// What to run.
    pub executable: ExecutableRef,
    /// Arguments after `argv[0]`.
    pub args: Vec<String>,
    /// A job's master (`SpawnMaster`): runs outside the slots, so no owner
    /// policy suspends it; `host` is then `HostId(0)`.
    pub master: bool,
    /// Environment on top of the daemon's (a master's, from its submit file).
    pub env: Vec<(String, String)>,
    /// Where a master's standard output and error go (else the sandbox's files).
    pub stdio: (Option<String>, Option<String>),
    /// Files copied into a master's sandbox before it starts.
    pub input_files: Vec<String>,
    /// Files of a master's sandbox sent back when it exits.
    pub return_files: Vec<String>,
    /// Files put in a master's sandbox from the cache, by content, named by
    /// their `name` (fetched like the executable when missing).
    pub inputs: Vec<ExecutableRef>,
    /// Where standard output and error go (a master: always its files).
    pub output: OutputRoute,
    /// The job's requests, which bind the process (its cgroup).
    pub requests: carmi_proto::msg::Requests,
}

/// The connection to the global RM, as far as the core is concerned.
#[derive(Clone, Debug, PartialEq)]
enum Link {
    /// No connection.
    Down,
    /// Advertised; waiting for `Registered`.
    Advertised,
    /// Registered: the slots' host ids are known and messages flow.
    Registered { hosts: Vec<HostId> },
}

/// An application connection.
#[derive(Clone, Debug)]
struct App {
    /// As declared in the handshake.
    declared_job: Option<JobId>,
    declared_process: Option<ProcessId>,
    endpoint: String,
    /// The token it presented, kept for a new job only (no declared job):
    /// the global RM checks it at each announcement until it attaches.
    token: Option<String>,
    /// Given by the global RM.
    attached: Option<(JobId, ProcessId)>,
    /// Whether the current global connection has been told about it.
    announced: bool,
    /// Requests forwarded that had no event yet, in order: told to the
    /// global RM after a reconnection (`ToGlobal::Unanswered`), so that one
    /// lost with the link is failed rather than awaited for ever.
    unanswered: Vec<RequestId>,
    /// Requests made while the global RM was away (or written to a link
    /// that broke before they left), with when they came: forwarded after
    /// the next announcement, so that a restart of the global RM is not an
    /// error the application must handle; failed after [`HOLD_WHILE_AWAY`].
    held: Vec<(RequestId, Request, f64)>,
}

/// How long a request waits for the global RM to come back before it fails
/// as unavailable: longer than a restart and the local RM's reconnection
/// back-off, short enough that a client of a pool whose global RM is down
/// hears so.
pub const HOLD_WHILE_AWAY: f64 = 30.0;

/// Where a process is in its life here.
#[derive(Clone, Debug, PartialEq)]
enum ProcState {
    /// Waiting for its executable from the global RM.
    Fetching,
    /// Handed to the launcher; `kill` if a `Kill` came meanwhile.
    Launching { kill: bool },
    /// Started; `killing` once a `Kill` was acted on.
    Running { killing: bool },
}

#[derive(Clone, Debug)]
struct Proc {
    launch: Launch,
    /// `None` for a master, which runs outside the slots.
    slot: Option<usize>,
    state: ProcState,
    /// When SIGKILL follows the SIGTERM of a `Kill` (the kill grace's end).
    kill_at: Option<f64>,
}

/// Executables asked for with `Fetch`, and who waits for them.
#[derive(Clone, Debug)]
struct Fetch {
    /// What the first spawn that needed it said the executable is.
    executable: ExecutableRef,
    waiting: Vec<ProcessId>,
    /// `Fetch` sent on the current connection.
    asked: bool,
    /// Bytes arrived and are being verified and stored.
    storing: bool,
}

/// The local RM's state.
#[derive(Debug)]
pub struct Core {
    slots: usize,
    link: Link,
    slot_states: Vec<SlotActivity>,
    apps: BTreeMap<ConnId, App>,
    procs: BTreeMap<ProcessId, Proc>,
    fetches: BTreeMap<String, Fetch>,
    /// Messages that must reach the global RM, kept while it is away.
    backlog: VecDeque<(ToGlobal, Bytes)>,
    effects: Vec<Effect>,
    /// Whether the owner policy lets new processes start.
    accepting: bool,
    /// Deadlines and the clock they are measured on.
    time: Timing,
    /// Processes here at the last step of the owner policy.
    policy_jobs: usize,
    /// What the metrics page counts ([`Core::metrics`]).
    counters: crate::metrics::Counters,
}

/// The core's clock and timers, in seconds of the driver's clock.
#[derive(Clone, Debug)]
struct Timing {
    /// The latest time [`Core::on_time`] was given (never goes back).
    now: f64,
    /// SIGTERM to SIGKILL delay for a killed process.
    kill_grace: f64,
    /// Heartbeat period when the global RM names none (`heartbeat_ms` 0).
    heartbeat_fallback: f64,
    /// The heartbeat period of the current registration.
    heartbeat_period: f64,
    /// When the next heartbeat is due; `None` while not registered.
    heartbeat_at: Option<f64>,
    /// How long the machine may be without a registration before it gives
    /// up ([`Effect::Orphaned`]); `None`: it waits for ever.
    orphan_limit: Option<f64>,
    /// When the last registration ended (or the core started).
    away_since: f64,
    /// [`Effect::Orphaned`] was asked for already.
    orphaned: bool,
    /// When the owner policy must be stepped next at the latest, as its
    /// last step named; `None` before the first step.
    policy_at: Option<f64>,
}

/// SIGTERM to SIGKILL delay until [`Core::set_timers`] names one (the
/// daemon's default `kill_grace_ms`).
pub const DEFAULT_KILL_GRACE: f64 = 2.0;

/// Heartbeat period used when the global RM names none, until
/// [`Core::set_timers`] names one (the daemon's default `heartbeat_ms`).
pub const DEFAULT_HEARTBEAT_FALLBACK: f64 = 5.0;

impl Core {
    /// A core for a machine with `slots` slots, not connected.
    pub fn new(slots: u32) -> Core {
        Core {
            slots: slots as usize,
            link: Link::Down,
            slot_states: vec![SlotActivity::Available; slots as usize],
            apps: BTreeMap::new(),
            procs: BTreeMap::new(),
            fetches: BTreeMap::new(),
            backlog: VecDeque::new(),
            effects: Vec::new(),
            accepting: true,
            time: Timing {
                now: 0.0,
                kill_grace: DEFAULT_KILL_GRACE,
                heartbeat_fallback: DEFAULT_HEARTBEAT_FALLBACK,
                heartbeat_period: DEFAULT_HEARTBEAT_FALLBACK,
                heartbeat_at: None,
                orphan_limit: None,
                away_since: 0.0,
                orphaned: false,
                policy_at: None,
            },
            policy_jobs: 0,
            counters: Default::default(),
        }
    }

    /// The effects produced since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots as u32
    }

    /// True while registered with the global RM.
    pub fn is_registered(&self) -> bool {
        matches!(self.link, Link::Registered { .. })
    }

    /// Processes started and not yet exited.
    pub fn running(&self) -> Vec<ProcessId> {
        self.procs
            .iter()
            .filter(|(_, p)| matches!(p.state, ProcState::Running { .. }))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Processes here in any stage (fetching, launching, running): what the owner policy counts as jobs.
    pub fn job_count(&self) -> usize {
        self.procs.len()
    }

    /// The state of each slot, in slot order.
    pub fn slot_states(&self) -> &[SlotActivity] {
        &self.slot_states
    }

    /// Number of messages kept for the global RM.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Checks the core's invariants; panics with the broken one (tests call it after every step).
    pub fn sanity_check(&self) {
        for (id, p) in &self.procs {
            assert_eq!(*id, p.launch.process, "process table key matches its entry");
            assert!(
                p.slot.is_none_or(|s| s < self.slots),
                "process {id} on slot {:?} of {}",
                p.slot,
                self.slots
            );
            let waiting = self
                .fetches
                .values()
                .filter(|f| f.waiting.contains(id))
                .count();
            assert!(
                p.kill_at.is_none() || p.state == ProcState::Running { killing: true },
                "process {id} has a SIGKILL deadline only while being killed"
            );
            let expected = usize::from(p.state == ProcState::Fetching);
            assert_eq!(
                waiting, expected,
                "process {id} waits for its executable iff Fetching"
            );
        }
        for (sha, f) in &self.fetches {
            assert_eq!(*sha, f.executable.sha256, "fetch table key is the hash");
            assert!(!f.waiting.is_empty(), "no fetch without a waiting process");
        }
        if !self.is_registered() {
            assert!(
                self.apps.values().all(|a| !a.announced),
                "no announced application without a registered link"
            );
        }
        assert_eq!(self.slot_states.len(), self.slots);
    }

    fn send(&mut self, msg: ToGlobal, payload: Bytes) {
        self.effects.push(Effect::ToGlobal(msg, payload));
    }

    /// Sends now if registered, otherwise keeps the message for the next connection.
    fn send_or_keep(&mut self, msg: ToGlobal, payload: Bytes) {
        if self.is_registered() {
            self.send(msg, payload);
        } else {
            self.backlog.push_back((msg, payload));
        }
    }

    fn send_app(&mut self, conn: ConnId, msg: FromLocal) {
        self.effects.push(Effect::ToApp(conn, msg));
    }

    // ----- the global link -----

    /// A connection to the global RM is up (handshake done): advertise on it.
    /// `ad` is the current machine ad in new syntax.
    pub fn on_global_connected(&mut self, ad: String) {
        if self.link != Link::Down {
            tracing::warn!("new global connection while the old one was not reported lost");
            self.on_global_lost(Vec::new());
        }
        self.link = Link::Advertised;
        let running = self.running();
        self.send(
            ToGlobal::Advertise {
                ad,
                slots: self.slots as u32,
                running,
            },
            Bytes::new(),
        );
    }

    /// The connection to the global RM is gone; `unsent` are the messages it
    /// had been given but had not written, in order.
    pub fn on_global_lost(&mut self, unsent: Vec<(ToGlobal, Bytes)>) {
        if self.is_registered() {
            self.time.away_since = self.time.now;
        }
        self.link = Link::Down;
        self.time.heartbeat_at = None;
        // Unsent messages were produced before anything now in the backlog.
        for (msg, payload) in unsent.into_iter().rev() {
            if must_deliver(&msg) {
                self.backlog.push_front((msg, payload));
            } else if let ToGlobal::Forward { conn, id, body } = msg {
                // Never reached the global RM: sent again on the next link.
                let now = self.time.now;
                if let Some(app) = self.apps.get_mut(&conn) {
                    app.unanswered.retain(|&r| r != id);
                    app.held.insert(0, (id, body, now));
                }
            }
        }
        for app in self.apps.values_mut() {
            app.announced = false;
        }
        for f in self.fetches.values_mut() {
            f.asked = false;
        }
    }

    /// A message from the global RM (`payload` is the frame payload).
    pub fn on_global(&mut self, msg: FromGlobal, payload: Bytes) {
        match msg {
            FromGlobal::Registered {
                hosts,
                heartbeat_ms,
            } => self.on_registered(hosts, heartbeat_ms),
            _ if !self.is_registered() => {
                tracing::warn!(
                    ?msg,
                    "message from the global RM before Registered; ignored"
                );
            }
            FromGlobal::Attached { conn, job, process } => self.on_attached(conn, job, process),
            FromGlobal::JobGone { conn, job, reason } => self.on_job_gone(conn, job, reason),
            FromGlobal::AttachRefused { conn, reason } => self.on_attach_refused(conn, reason),
            FromGlobal::Deliver { conn, event } => {
                if let Some(app) = self.apps.get_mut(&conn) {
                    let answered = event.request();
                    app.unanswered.retain(|&r| r != answered);
                    self.send_app(conn, FromLocal::Event(event));
                } else {
                    tracing::debug!(%conn, ?event, "event for a connection that is gone; dropped");
                }
            }
            msg @ (FromGlobal::Spawn { .. } | FromGlobal::SpawnMaster { .. }) => {
                if let Some(launch) = Launch::from_spawn(msg) {
                    self.on_spawn(launch);
                }
            }
            FromGlobal::Kill { process } => self.on_kill(process),
            FromGlobal::ReadLog {
                request,
                process,
                stream,
                offset,
            } => self.on_read_log(request, process, stream, offset),
            FromGlobal::Executable { executable } => self.on_executable(executable, payload),
            FromGlobal::FetchFrom { sha256, source } => self.on_fetch_from(sha256, source),
            FromGlobal::NoExecutable { sha256 } => {
                let reason = format!("the global RM has no executable with SHA-256 {sha256}");
                self.fail_fetch(&sha256, &reason);
            }
            // The global RM refused something of ours (an ad over its limits,
            // a heartbeat update it could not take): say what, it is not ours
            // to retry differently.
            FromGlobal::AdminFailed(f) => {
                tracing::warn!(code = ?f.code, "the global RM refused: {}", f.message);
            }
            // Secrets stay with the driver, which takes these before the core.
            FromGlobal::JobCredential { .. }
            | FromGlobal::TokenRenewed { .. }
            | FromGlobal::MachineCertified { .. } => {}
            FromGlobal::Pool(_)
            | FromGlobal::Submitted { .. }
            | FromGlobal::Removed { .. }
            | FromGlobal::Queue(_)
            | FromGlobal::Analysis(_)
            | FromGlobal::Ads(_)
            | FromGlobal::StageStats(_)
            | FromGlobal::History(_)
            | FromGlobal::Held { .. }
            | FromGlobal::Released { .. }
            | FromGlobal::Events { .. }
            | FromGlobal::Files(_)
            | FromGlobal::Tokens(_)
            | FromGlobal::Alloc(_)
            | FromGlobal::Users(_)
            | FromGlobal::Log { .. } => {
                tracing::warn!("an admin answer was sent to a local RM; ignored");
            }
        }
    }

    /// `carmi logs`: a started process's output is read by the driver; any
    /// other is answered at once with why not.
    fn on_read_log(&mut self, request: u64, process: ProcessId, stream: StdStream, offset: u64) {
        let Some(p) = self.procs.get(&process) else {
            let why = format!("process {process} is not running on this machine");
            return self.on_log_read(request, Err(why));
        };
        if !matches!(p.state, ProcState::Running { .. }) {
            let why = format!("process {process} has not started yet");
            return self.on_log_read(request, Err(why));
        }
        let path = match stream {
            StdStream::Stdout => p.launch.stdio.0.clone(),
            StdStream::Stderr => p.launch.stdio.1.clone(),
        };
        let job = p.launch.job;
        self.effects.push(Effect::ReadLog {
            request,
            process,
            job,
            stream,
            offset,
            path,
        });
    }

    /// The driver read a process's output for [`Effect::ReadLog`]: the
    /// answer goes to the global RM if it is still connected (a new
    /// connection's global RM no longer waits for it).
    pub fn on_log_read(&mut self, request: u64, result: Result<LogChunk, String>) {
        if self.is_registered() {
            self.send(ToGlobal::LogRead { request, result }, Bytes::new());
        }
    }

    fn on_registered(&mut self, hosts: Vec<HostId>, heartbeat_ms: u64) {
        if self.link != Link::Advertised {
            tracing::warn!(link = ?self.link, "Registered without a pending advertisement; ignored");
            return;
        }
        if hosts.len() != self.slots {
            tracing::warn!(
                got = hosts.len(),
                slots = self.slots,
                "Registered with a host id count different from our slot count"
            );
        }
        self.link = Link::Registered { hosts };
        self.start_heartbeats(heartbeat_ms);
        while let Some((msg, payload)) = self.backlog.pop_front() {
            self.send(msg, payload);
        }
        // The current state of slots that are not simply available.
        for slot in 0..self.slots {
            let state = self.slot_states[slot];
            if state != SlotActivity::Available {
                self.send(
                    ToGlobal::SlotState {
                        slot: slot as u32,
                        state,
                    },
                    Bytes::new(),
                );
            }
        }
        let conns: Vec<ConnId> = self.apps.keys().copied().collect();
        for conn in conns {
            self.announce(conn);
        }
        let asks: Vec<String> = self
            .fetches
            .iter()
            .filter(|(_, f)| !f.asked && !f.storing)
            .map(|(sha, _)| sha.clone())
            .collect();
        for sha256 in asks {
            self.fetches.get_mut(&sha256).expect("listed above").asked = true;
            self.send(ToGlobal::Fetch { sha256 }, Bytes::new());
        }
    }

    /// Heartbeat time: `update` holds the dynamic attributes that changed.
    pub fn on_heartbeat(&mut self, update: String) {
        if self.is_registered() {
            self.send(ToGlobal::Heartbeat { update }, Bytes::new());
        }
    }
}

/// Messages whose loss would leave the global RM wrong about this machine;
/// the rest (heartbeats, attaches, fetches, forwards) are redone or failed.
fn must_deliver(msg: &ToGlobal) -> bool {
    matches!(
        msg,
        ToGlobal::Started { .. }
            | ToGlobal::Exited { .. }
            | ToGlobal::Vacating { .. }
            | ToGlobal::Upload { .. }
            | ToGlobal::MasterFiles { .. }
    )
}

#[path = "node_owner.rs"]
mod owner;

#[path = "node_procs.rs"]
mod procs;

#[path = "node_apps.rs"]
mod apps;

#[path = "node_time.rs"]
mod time;

#[path = "node_policy.rs"]
mod policy;

#[path = "node_metrics.rs"]
mod metrics;
pub use policy::PolicyDue;

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "node_log_tests.rs"]
mod log_tests;

#[cfg(test)]
#[path = "node_unanswered_tests.rs"]
mod unanswered_tests;

#[cfg(test)]
#[path = "node_token_tests.rs"]
mod token_tests;
