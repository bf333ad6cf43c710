//! Protocol messages, typed by direction.
//!
//! Three kinds of connection exist, each opened by a handshake
//! ([`crate::handshake`]) that names its [`Role`]:
//! - application process -> its local RM: [`ToLocal`] up, [`FromLocal`] down;
//! - local RM -> global RM: [`ToGlobal`] up, [`FromGlobal`] down;
//! - application process -> application process (direct messages): [`PeerMessage`].
//!
//! An admin tool (`carmi status`) talks to the global RM with [`ToGlobal::Status`].
//! A control tool (`owner-sim`) talks to a local RM with [`ToLocalControl`] /
//! [`FromLocalControl`] after a handshake as [`Role::Admin`].
//!
//! Messages are serde types encoded as JSON in the frame header; bulk bytes
//! (executables, application message bodies) travel verbatim as the frame
//! payload, next to the header (see [`crate::frame`]). A message that carries
//! a payload says so in its documentation.
//!
//! `docs/protocol.md` (repository root) describes these messages for
//! implementers: when each is sent and what answers it. Change both together.

use serde::{Deserialize, Serialize};

use crate::ids::{ConnId, HostId, JobId, ProcessId, RequestId};

/// Version of this protocol; both sides of a handshake must agree.
pub const PROTOCOL_VERSION: u32 = 1;

/// Who opens a connection, declared in the handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A local RM connecting to the global RM; `name` identifies the machine in the pool.
    Local {
        /// The machine's name in the pool (unique).
        name: String,
    },
    /// An application process connecting to its local RM.
    Application {
        /// The job to join (processes started by CARMI get it from `CARMI_JOB`);
        /// `None` starts a new job with this process as its first process.
        job: Option<JobId>,
        /// The process id the RM gave this process (`CARMI_PROCESS`); `None` for a new job's first process.
        process: Option<ProcessId>,
        /// `host:port` where this process accepts direct messages from its peers.
        endpoint: String,
    },
    /// An application process sending direct messages to another one.
    Peer {
        /// The sender.
        from: ProcessId,
        /// The job both belong to; a peer of another job is refused.
        job: JobId,
    },
    /// An administration tool (`carmi status`).
    Admin,
    /// A local RM forwarding a spawned process's standard output and error to
    /// the process that asked for it ([`OutputRoute::Forward`]), on the
    /// requester's direct-message endpoint; [`OutputFrame`]s follow.
    Output {
        /// The job both processes belong to; another job's output is refused.
        job: JobId,
        /// The spawned process whose output this is.
        process: ProcessId,
        /// The requester's `ClassSpawn` request id.
        request: RequestId,
    },
    /// A daemon fetching an executable over a staging connection
    /// ([`crate::stage`]): a local RM from a peer local RM or from the global RM.
    Stager {
        /// The fetching machine's name, for logs.
        name: String,
    },
}

/// What the submitter of `class_spawn` wants done with the new process's
/// standard output and error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputMode {
    /// Stream both to the requesting process (as client events or files on its side).
    Forward,
    /// Keep them in files on the machine that runs the process
    /// (`WORK_DIR/output/<job>/<process>.{out,err}`); what older clients got.
    #[default]
    Keep,
    /// Throw them away (`/dev/null`).
    Discard,
}

/// Where a local RM sends a spawned process's standard output and error
/// (decided by the global RM from the request's [`OutputMode`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputRoute {
    /// Files on the machine ([`OutputMode::Keep`]).
    #[default]
    Keep,
    /// `/dev/null`.
    Discard,
    /// Stream to the requester over a direct connection ([`Role::Output`]).
    Forward {
        /// `host:port` of the requester's direct-message endpoint.
        endpoint: String,
        /// The requester's `ClassSpawn` request id.
        request: RequestId,
    },
}

/// One of a process's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StdStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A frame on a [`Role::Output`] connection, local RM -> requester.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputFrame {
    /// Bytes the process wrote to `stream`; they are the frame payload, verbatim.
    Data {
        /// Which stream.
        stream: StdStream,
    },
    /// Both streams reached end of file and every byte was sent before this.
    End,
}

/// Where `class_spawn` should run a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpawnTarget {
    /// Any idle host of this class allocated to the job.
    Class(String),
    /// This host, which must be allocated to the job.
    Host(HostId),
}

/// A content-addressed executable. Its bytes are uploaded once to the global
/// RM ([`ToLocal::UploadExecutable`]) and staged from there to the machines
/// that lack them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecutableRef {
    /// File name, for the process's `argv[0]` and for people.
    pub name: String,
    /// SHA-256 of the contents, lower-case hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// A service request of Appendix A. Every request carries a [`RequestId`]
/// chosen by the client; its outcome arrives later as an [`Event`] with the same id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Cancel an outstanding request (a pending `AddHosts`, a notification subscription).
    CancelRequest {
        /// The request to cancel.
        request: RequestId,
    },
    /// The hosts currently allocated to the job.
    Config,
    /// All attributes of a host's machine ad.
    GetHostInfo {
        /// The host.
        host: HostId,
    },
    /// Allocate `count` more hosts of `class`, reported in groups of `increment`.
    AddHosts {
        /// Class name (defined with `DefineClass` or at submit time).
        class: String,
        /// How many hosts in all.
        count: u32,
        /// Hosts per `HostsAdded` event (at least 1).
        increment: u32,
    },
    /// Give hosts back to the pool (their processes are killed).
    DelHosts {
        /// Hosts allocated to the job.
        hosts: Vec<HostId>,
    },
    /// Be told whenever the pool adds a host of `class` to the job.
    AddNotify {
        /// Class name.
        class: String,
    },
    /// Be told when any of these hosts is taken away.
    DeleteNotify {
        /// Hosts allocated to the job.
        hosts: Vec<HostId>,
    },
    /// Be told when any of these hosts is suspended (owner back).
    SuspendNotify {
        /// Hosts allocated to the job.
        hosts: Vec<HostId>,
    },
    /// Be told when any of these hosts resumes.
    ResumeNotify {
        /// Hosts allocated to the job.
        hosts: Vec<HostId>,
    },
    /// Start a process.
    ClassSpawn {
        /// What to run (uploaded before).
        executable: ExecutableRef,
        /// Arguments after `argv[0]`.
        args: Vec<String>,
        /// Where.
        target: SpawnTarget,
        /// What becomes of its standard output and error (absent: [`OutputMode::Keep`]).
        #[serde(default)]
        output: OutputMode,
    },
    /// State of a process of the job.
    ProcessInfo {
        /// The process.
        process: ProcessId,
    },
    /// Class names and expressions of the job.
    GetClassDefinitions,
    /// Define (or redefine) a resource class of the job.
    DefineClass {
        /// Class name.
        name: String,
        /// ClassAd expression over machine attributes.
        expression: String,
        /// ClassAd expression rating a matching machine (`TARGET` is the job
        /// ad): higher is taken first, the fastest among equals; absent: speed alone.
        #[serde(default)]
        rank: Option<String>,
    },
    /// Never grant the machines of `hosts` to the job for `class` again (a
    /// machine that proved too slow): every slot of each machine is left out
    /// of the class's future `AddHosts` grants and growth. Hosts the job holds
    /// stay until given back with `DelHosts` (send this first, or a pending
    /// `AddHosts` may take a returned host straight back). Answered with
    /// `Done(Ok)`; lasts as long as the class, through redefinitions.
    ExcludeHosts {
        /// Class name.
        class: String,
        /// Hosts of the pool (the job's own or earlier ones) naming the machines.
        hosts: Vec<HostId>,
    },
    /// Remove a class; fails while hosts of that class are allocated.
    RemoveClass {
        /// Class name.
        name: String,
    },
    /// Where a process accepts direct messages (looked up once per peer by the client).
    LookupProcess {
        /// The process.
        process: ProcessId,
    },
}

/// A host allocated to a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The host.
    pub host: HostId,
    /// `slotN@machine`.
    pub name: String,
    /// The class it was allocated for.
    pub class: String,
    /// The machine ad in new ClassAd syntax (all attributes).
    pub ad: String,
}

/// How a process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Could not be started (reason).
    FailedToStart(String),
    /// Its host was lost or vacated.
    HostLost,
}

/// State of a process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ProcessState {
    /// Being staged or started.
    Starting,
    /// Running on a host.
    Running,
    /// Stopped because the owner came back.
    Suspended,
    /// Ended.
    Exited {
        /// How.
        status: ExitStatus,
        /// User + system CPU seconds.
        cpu_seconds: f64,
    },
}

/// Information about a process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The process.
    pub process: ProcessId,
    /// Where it runs (or ran); `None` for the job's first process when not started by CARMI.
    pub host: Option<HostId>,
    /// Its state.
    pub state: ProcessState,
}

/// A class definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassDef {
    /// Name.
    pub name: String,
    /// Expression text.
    pub expression: String,
    /// The rank expression's text, as defined (`DefineClass`'s `rank`, the
    /// submit file's `rank`); `None` when machines are ordered by speed alone.
    /// Absent in answers from older global RMs.
    #[serde(default)]
    pub rank: Option<String>,
    /// Names of the machines excluded from the class (`ExcludeHosts`), sorted.
    #[serde(default)]
    pub excluded: Vec<String>,
}

/// Why a request failed: a code to branch on and a message a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub code: FailureCode,
    /// What, where and why, e.g. "class `fast`: line 1, column 5: expected ...".
    pub message: String,
}

/// Kinds of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureCode {
    /// The class is not defined for this job.
    UnknownClass,
    /// A class expression does not parse.
    BadExpression,
    /// The host is unknown or not allocated to this job.
    NotYourHost,
    /// The process is unknown or belongs to another job.
    UnknownProcess,
    /// The class still has hosts allocated.
    ClassInUse,
    /// The request was cancelled.
    Cancelled,
    /// The executable was never uploaded or its bytes do not match the hash.
    BadExecutable,
    /// The request makes no sense (zero count, empty list...).
    Invalid,
    /// The RM lost contact with what the request needs.
    Unavailable,
    /// The named host is suspended (its owner is back): it takes no new
    /// process until it resumes. Not the process's fault: try again after
    /// the host's `HostResumed`.
    HostSuspended,
}

/// Successful outcome of a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Done, nothing to report (`DelHosts`, `DefineClass`, `RemoveClass`,
    /// `ExcludeHosts`, `CancelRequest`, and a subscription being registered).
    Ok,
    /// `Config`.
    Hosts(Vec<HostInfo>),
    /// `GetHostInfo`.
    Host(HostInfo),
    /// `ProcessInfo`.
    Process(ProcessInfo),
    /// `GetClassDefinitions`.
    Classes(Vec<ClassDef>),
    /// `LookupProcess`: `host:port` of the process's direct-message listener.
    Endpoint {
        /// The process.
        process: ProcessId,
        /// Where it listens.
        address: String,
    },
}

/// What an application receives from CARMI, always tagged with the request it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A request completed.
    Done {
        /// The request.
        request: RequestId,
        /// Its result.
        reply: Reply,
    },
    /// A request failed (or was cancelled).
    Failed {
        /// The request.
        request: RequestId,
        /// Why.
        failure: Failure,
    },
    /// Hosts were added: one event per `increment` hosts of an `AddHosts`, or
    /// one per host for an `AddNotify` subscription.
    HostsAdded {
        /// The `AddHosts` or `AddNotify` request.
        request: RequestId,
        /// The new hosts.
        hosts: Vec<HostInfo>,
        /// Hosts of the request still to come (0 when it is complete).
        remaining: u32,
    },
    /// A host was taken away (owner reclaimed it, machine lost, `DelHosts`).
    HostDeleted {
        /// The `DeleteNotify` request.
        request: RequestId,
        /// The host.
        host: HostId,
        /// Why, for people.
        reason: String,
    },
    /// A host was suspended.
    HostSuspended {
        /// The `SuspendNotify` request.
        request: RequestId,
        /// The host.
        host: HostId,
    },
    /// A host resumed.
    HostResumed {
        /// The `ResumeNotify` request.
        request: RequestId,
        /// The host.
        host: HostId,
    },
    /// A spawned process is running.
    ProcessStarted {
        /// The `ClassSpawn` request.
        request: RequestId,
        /// The new process.
        process: ProcessId,
        /// Where it runs.
        host: HostId,
    },
    /// A spawned process ended.
    ProcessExited {
        /// The `ClassSpawn` request.
        request: RequestId,
        /// The process.
        process: ProcessId,
        /// How it ended.
        status: ExitStatus,
        /// User + system CPU seconds it used (with its children).
        cpu_seconds: f64,
    },
}

impl Event {
    /// The request this event answers or reports on; every event carries one.
    pub fn request(&self) -> RequestId {
        match self {
            Event::Done { request, .. }
            | Event::Failed { request, .. }
            | Event::HostsAdded { request, .. }
            | Event::HostDeleted { request, .. }
            | Event::HostSuspended { request, .. }
            | Event::HostResumed { request, .. }
            | Event::ProcessStarted { request, .. }
            | Event::ProcessExited { request, .. } => *request,
        }
    }
}

/// Application process -> its local RM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToLocal {
    /// A service request.
    Request {
        /// Chosen by the client, unique within the process.
        id: RequestId,
        /// The request.
        body: Request,
    },
    /// The bytes of an executable follow as the frame payload.
    UploadExecutable {
        /// Its reference (hash checked by the receiver).
        executable: ExecutableRef,
    },
}

/// Local RM -> application process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromLocal {
    /// First message after the handshake: who the process is.
    Attached {
        /// Its job.
        job: JobId,
        /// Its process id.
        process: ProcessId,
    },
    /// An RM event.
    Event(Event),
}

/// Local RM -> global RM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToGlobal {
    /// The machine ad (new syntax) and how many slots it offers; sent on every (re)connection.
    Advertise {
        /// Machine ad in new ClassAd syntax.
        ad: String,
        /// Number of slots (processes it can run at once).
        slots: u32,
        /// Processes still running here from before a reconnection.
        running: Vec<ProcessId>,
    },
    /// Periodic liveness, with the dynamic attributes that changed (`Name = expr` lines).
    Heartbeat {
        /// Changed attributes in old syntax.
        update: String,
    },
    /// An application process connected to this local RM.
    AppAttach {
        /// The connection at this local RM.
        conn: ConnId,
        /// What the process declared (`Role::Application` fields).
        job: Option<JobId>,
        /// Its process id, if it was started by CARMI.
        process: Option<ProcessId>,
        /// Its direct-message endpoint.
        endpoint: String,
    },
    /// An application process disconnected.
    AppDetach {
        /// The connection.
        conn: ConnId,
    },
    /// A request from an application process, forwarded.
    Forward {
        /// The connection it came on.
        conn: ConnId,
        /// The request id.
        id: RequestId,
        /// The request.
        body: Request,
    },
    /// An executable upload, forwarded; the bytes follow as the frame payload.
    Upload {
        /// Its reference.
        executable: ExecutableRef,
    },
    /// Ask for an executable's bytes (not in this machine's cache).
    Fetch {
        /// Hash of the executable.
        sha256: String,
    },
    /// A process started by `Spawn` is running (or failed to start).
    Started {
        /// The process.
        process: ProcessId,
        /// `Err` with a reason when it could not be started.
        result: Result<(), String>,
    },
    /// A process ended.
    Exited {
        /// The process.
        process: ProcessId,
        /// How.
        status: ExitStatus,
        /// User + system CPU seconds.
        cpu_seconds: f64,
    },
    /// The owner policy changed a slot's state.
    SlotState {
        /// Slot number (0-based) on this machine.
        slot: u32,
        /// New state.
        state: SlotActivity,
    },
    /// Admin: list the pool.
    Status,
    /// Admin: submit a job (`carmi submit`). Its master's executable was
    /// uploaded before on the same connection ([`ToGlobal::Upload`]).
    /// Answered with [`FromGlobal::Submitted`] or [`FromGlobal::AdminFailed`].
    Submit(Box<SubmitRequest>),
    /// Admin: remove a job (`carmi rm`): its processes are killed, its
    /// machines freed. Answered with [`FromGlobal::Removed`] or [`FromGlobal::AdminFailed`].
    RemoveJob {
        /// The job.
        job: JobId,
    },
    /// Admin: the job queue (`carmi q`). Answered with [`FromGlobal::Queue`].
    Queue,
    /// Admin: why a job's classes are not (fully) satisfied (`carmi q -analyze`).
    /// Answered with [`FromGlobal::Analysis`] or [`FromGlobal::AdminFailed`].
    Analyze {
        /// The job.
        job: JobId,
    },
    /// Admin: every online machine's whole ad (`carmi status -l`, `-constraint`).
    /// Answered with [`FromGlobal::Ads`].
    MachineAds,
    /// Where this local RM serves its executable cache to peers (a staging
    /// listener, [`crate::stage`]); sent after every `Registered`. A local RM
    /// that never sends it only fetches, it is never asked to serve.
    StageServe {
        /// `host:port` of its staging listener.
        endpoint: String,
    },
    /// Outcome of a fetch the global RM directed with [`FromGlobal::FetchFrom`]:
    /// on success this machine holds the executable (and may be named as a
    /// source); on failure the global RM directs it elsewhere or answers
    /// [`FromGlobal::NoExecutable`].
    Fetched {
        /// The executable.
        sha256: String,
        /// Where it was fetched from.
        source: StageSource,
        /// `Err` with why the copy was refused (bad hash, peer gone, stalled).
        result: Result<(), String>,
    },
    /// Admin: staging counters. Answered with [`FromGlobal::StageStats`].
    StageStats,
    /// Admin: jobs that left the queue, oldest first (`carmi history`): the
    /// last [`JobRecord`]s the global RM keeps. Answered with [`FromGlobal::History`].
    History {
        /// Only this job (an empty answer when it is not in the history).
        #[serde(default)]
        job: Option<JobId>,
    },
    /// Admin: hold a submitted job (`carmi hold`): it keeps its place in the
    /// queue, its processes are killed and its hosts go back. Answered with
    /// [`FromGlobal::Held`] or [`FromGlobal::AdminFailed`] (not in the
    /// queue, started by hand, held already).
    Hold {
        /// The job.
        job: JobId,
        /// Why, for `carmi q` and the event log; absent: "held by USER".
        #[serde(default)]
        reason: Option<String>,
        /// Who holds it.
        user: String,
    },
    /// Admin: release a held job (`carmi release`): it waits again at its
    /// old place and its master starts from scratch once its minimums can be
    /// met. Answered with [`FromGlobal::Released`] or [`FromGlobal::AdminFailed`].
    Release {
        /// The job.
        job: JobId,
    },
    /// Admin: a job's events after number `after` (`carmi events`), while it
    /// is queued and for a bounded number of jobs after it ended. Answered
    /// with [`FromGlobal::Events`] or [`FromGlobal::AdminFailed`] (unknown job).
    Events {
        /// The job.
        job: JobId,
        /// Only events numbered above this (0: all).
        #[serde(default)]
        after: u64,
    },
    /// What a job's master left that goes back to its submit directory
    /// (`output`, `error`, `transfer_output_files`), sent by the local RM that
    /// ran it just before its `Exited`: the bytes of `files`, in order, are
    /// the frame's payload, each cut to what [`crate::limits::MAX_RETURNED_BYTES`]
    /// allows (and marked `truncated`).
    MasterFiles {
        /// The master process.
        process: ProcessId,
        /// The files, in payload order.
        files: Vec<ReturnedFile>,
    },
    /// Admin: the files an ended job's master sent back (`carmi wait`,
    /// `carmi fetch`). Answered with [`FromGlobal::Files`] or [`FromGlobal::AdminFailed`].
    FetchFiles {
        /// The job.
        job: JobId,
    },
    /// Admin: a running job's master's standard output or error from byte
    /// `offset` (`carmi logs`). The global RM asks the local RM running the
    /// master ([`FromGlobal::ReadLog`]) and answers with [`FromGlobal::Log`]
    /// or [`FromGlobal::AdminFailed`] (not queued, master not started yet,
    /// its machine not connected or lost, no answer in time).
    Logs {
        /// The job.
        job: JobId,
        /// Which stream.
        stream: StdStream,
        /// First byte wanted.
        offset: u64,
    },
    /// A local RM's answer to [`FromGlobal::ReadLog`]: at most
    /// [`crate::limits::MAX_LOG_CHUNK_BYTES`] of the stream, or why not.
    LogRead {
        /// The number the global RM gave the request.
        request: u64,
        /// What was read.
        result: Result<LogChunk, String>,
    },
}

/// A piece of a master's standard output or error (`carmi logs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The text, from byte `offset`: bytes that are not UTF-8 come as
    /// U+FFFD, and a character cut by the end of the read is left for the next.
    pub text: String,
    /// Where the next read starts (`offset` + the bytes `text` came from).
    pub next: u64,
    /// The stream's size when it was read: more is waiting when `next < size`.
    pub size: u64,
}

/// A file a master left, sent back to its submit directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedFile {
    /// Its name in the master's sandbox (`stdout`, `stderr`, or a
    /// `transfer_output_files` entry).
    pub name: String,
    /// Bytes sent (after any cut).
    pub size: u64,
    /// True when the file was larger than its share of the limit and was cut.
    #[serde(default)]
    pub truncated: bool,
    /// Where it goes on the submit machine (absolute); filled in by the
    /// global RM from the submit file, empty from the local RM.
    #[serde(default)]
    pub dest: String,
}

/// The files an ended job's master sent back, kept by the global RM in its
/// state directory beside the job's history record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFiles {
    /// The master that sent them (they are stored under its id).
    pub process: ProcessId,
    /// The files, with their destinations.
    pub files: Vec<ReturnedFile>,
}

/// Where a local RM fetches an executable from (answer to a `Fetch`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StageSource {
    /// The global RM's own store, over a staging connection to its listener.
    Global,
    /// Another local RM's cache (it may still be receiving the executable).
    Peer {
        /// The machine's name.
        name: String,
        /// Its staging listener.
        endpoint: String,
    },
}

/// Counters of the global RM about staging (answer to [`ToGlobal::StageStats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStats {
    /// Executable copies the global RM started sending from its store
    /// (staging connections, plus whole-executable `Executable` answers).
    pub global_sends: u64,
    /// Fetches directed to the global store.
    pub directed_global: u64,
    /// Fetches directed to a peer.
    pub directed_peer: u64,
    /// Fetches reported complete and verified.
    pub completed: u64,
    /// Fetches reported failed (corrupt copy, peer gone, stalled), each then
    /// directed elsewhere.
    pub failed: u64,
}

/// A job as `carmi submit` sends it: the parsed submit file, with the master's
/// executable already uploaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// Who submits (a user name, for `carmi q` and the job ad's `Owner`).
    pub owner: String,
    /// The machine (local RM name) where the master runs.
    pub machine: String,
    /// The master's executable.
    pub executable: ExecutableRef,
    /// The parsed submit file (macros not yet expanded: the job id is not known).
    pub spec: crate::submit::JobSpec,
    /// Wall-clock submit time, seconds since the Unix epoch (the submitter's clock).
    pub submitted_unix: u64,
    /// True when `machine` is only the submit machine's name, not a choice:
    /// the master runs there if it is a machine of the pool, else the global
    /// RM places it on a machine that matches the job's `master_requirements`.
    /// False pins the master to `machine` (`--machine`, `CARMI_MACHINE`).
    #[serde(default)]
    pub anywhere: bool,
}

/// One job, for `carmi q`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub job: JobId,
    /// Who submitted it (for a job started by hand: its machine).
    pub owner: String,
    /// Wall-clock submit time, seconds since the Unix epoch (0 when unknown).
    pub submitted_unix: u64,
    /// `waiting`, `running`, `held` (with the reason in `note`), or `attached`
    /// (started by hand, no submit file).
    pub state: String,
    /// The master's executable name (empty for a job started by hand).
    pub executable: String,
    /// The master process, once started.
    pub master: Option<ProcessId>,
    /// Per class: hosts held, minimum, maximum.
    pub classes: Vec<ClassStatus>,
    /// Why the job cannot proceed, when the global RM knows (a minimum the
    /// pool cannot supply); absent from older global RMs.
    #[serde(default)]
    pub note: Option<String>,
}

/// How a job left the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEnd {
    /// Its master (for a job started by hand: its first process) ended this way.
    Completed(ExitStatus),
    /// Its master could not be started: the local RM's reason (the `exec`
    /// error, a staging failure), so that the job does not vanish silently.
    FailedToStart(String),
    /// Removed with `carmi rm`.
    Removed,
    /// Started by hand: its first process disconnected from its local RM.
    Detached,
}

/// A job that left the queue, for `carmi history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job.
    pub job: JobId,
    /// Who submitted it (for a job started by hand: its machine).
    pub owner: String,
    /// The master's executable name (empty for a job started by hand).
    pub executable: String,
    /// Wall-clock submit time, seconds since the Unix epoch (0 when unknown).
    pub submitted_unix: u64,
    /// Wall-clock end time at the global RM, seconds since the Unix epoch.
    pub ended_unix: u64,
    /// How it ended.
    pub end: JobEnd,
    /// What its master sent back for the submit directory, if anything.
    #[serde(default)]
    pub files: Option<JobFiles>,
    /// What it used, for `carmi history` (zero from global RMs before it was recorded).
    #[serde(default)]
    pub usage: JobUsage,
}

/// What a job used over its life, for `carmi history`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    /// When its master started, seconds since the Unix epoch (0: never, or
    /// before a restart of the global RM).
    #[serde(default)]
    pub started_unix: u64,
    /// CPU time of its processes that exited (master and workers), milliseconds.
    #[serde(default)]
    pub cpu_ms: u64,
    /// The machines its processes ran on, sorted.
    #[serde(default)]
    pub machines: Vec<String>,
}

/// One class of a job, for `carmi q`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStatus {
    /// Class name.
    pub name: String,
    /// Its requirements expression.
    pub requirements: String,
    /// Its rank expression, if it has one (absent from older global RMs).
    #[serde(default)]
    pub rank: Option<String>,
    /// Hosts the job holds for it.
    pub held: u32,
    /// Fewest the job starts with (0 for a class defined at run time).
    pub min: u32,
    /// Most it grows to (0 for a class defined at run time: only `AddHosts` counts).
    pub max: u32,
}

/// Why a class of a job is not (fully) satisfied: every online slot counted
/// once, in the first of these categories that applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassAnalysis {
    /// The class, with held/min/max.
    pub class: ClassStatus,
    /// Online slots in the pool.
    pub slots: u32,
    /// Slots whose machine the class's requirements reject.
    pub rejected_by_class: u32,
    /// Slots whose machine's own `Requirements` reject the job.
    pub rejecting_job: u32,
    /// Matching slots held by this job (any class).
    pub held_by_job: u32,
    /// Matching slots claimed by other jobs.
    pub claimed_by_others: u32,
    /// Of those, slots above their job's minimum, which this job's start may take back.
    pub preemptible: u32,
    /// Matching slots taken by their owners (suspended or vacated).
    pub owner: u32,
    /// Matching slots idle now.
    pub idle: u32,
    /// For the first few machines whose owners hold matching slots, why:
    /// `(machine, "START is false: KeyboardIdle > 15 * Minute (KeyboardIdle = 32)")`.
    #[serde(default)]
    pub owner_reasons: Vec<(String, String)>,
}

/// A job's classes explained, for `carmi q -analyze`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAnalysis {
    /// The job.
    pub job: JobStatus,
    /// Jobs ahead of it in the queue (0 unless waiting).
    pub queued_ahead: u32,
    /// One entry per class.
    pub classes: Vec<ClassAnalysis>,
}

/// What the owner policy says about a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotActivity {
    /// Available to the pool.
    Available,
    /// Owner back: processes stopped.
    Suspended,
    /// Owner stayed: processes killed, slot withdrawn until available again.
    Vacated,
}

/// What an owner-activity source tells a local RM. Real machines measure
/// their owner themselves; simulated owners (`owner-sim`) report through this,
/// either in-process (`carmi_local::daemon::Daemon::owner_event`) or over the
/// local RM's control connection.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum OwnerEvent {
    /// The owner is at the machine: keyboard idle time is zero from now on.
    Arrive,
    /// The owner left: keyboard idle time counts up from zero.
    Leave,
    /// The load average the owner's own programs put on the machine.
    Load(f64),
}

/// Control tool (`owner-sim`, an admin) -> local RM, on a connection whose
/// handshake role is [`Role::Admin`] (the local RM's control connection).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToLocalControl {
    /// Owner activity, for a local RM whose owner source is `simulated`.
    Owner(OwnerEvent),
}

/// Local RM -> control tool: one answer per [`ToLocalControl`], in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromLocalControl {
    /// The owner event was taken in and the policy evaluated; any suspend,
    /// resume or vacate it caused has been signalled before this was sent.
    OwnerApplied {
        /// False if the local RM measures a real owner and ignored the event.
        applied: bool,
        /// The machine's policy state afterwards (`Owner`, `Unclaimed`, `Claimed`, `Preempting`).
        state: String,
        /// Its activity afterwards (`Idle`, `Busy`, `Suspended`, `Vacating`, `Killing`).
        activity: String,
    },
}

/// Global RM -> local RM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromGlobal {
    /// Answer to `Advertise`: the host id of each slot, in slot order.
    Registered {
        /// One per slot.
        hosts: Vec<HostId>,
        /// Heartbeat period the global RM expects, in milliseconds.
        heartbeat_ms: u64,
    },
    /// Answer to `AppAttach`.
    Attached {
        /// The connection.
        conn: ConnId,
        /// The job.
        job: JobId,
        /// The process.
        process: ProcessId,
    },
    /// An event for an application process connected here.
    Deliver {
        /// The connection.
        conn: ConnId,
        /// The event.
        event: Event,
    },
    /// Start a process on a slot.
    Spawn {
        /// The new process.
        process: ProcessId,
        /// Its job.
        job: JobId,
        /// The slot's host id.
        host: HostId,
        /// What to run.
        executable: ExecutableRef,
        /// Arguments after `argv[0]`.
        args: Vec<String>,
        /// Where its standard output and error go (absent: [`OutputRoute::Keep`]).
        #[serde(default)]
        output: OutputRoute,
    },
    /// Kill a process (and its children).
    Kill {
        /// The process.
        process: ProcessId,
    },
    /// An executable's bytes follow as the frame payload (answer to `Fetch`).
    Executable {
        /// Its reference.
        executable: ExecutableRef,
    },
    /// Answer to `Fetch`: fetch the executable from `source` over a staging
    /// connection ([`crate::stage`]), then report with [`ToGlobal::Fetched`].
    FetchFrom {
        /// The executable.
        sha256: String,
        /// Where from.
        source: StageSource,
    },
    /// Admin: answer to [`ToGlobal::StageStats`].
    StageStats(StageStats),
    /// `Fetch` of an unknown executable.
    NoExecutable {
        /// The hash asked for.
        sha256: String,
    },
    /// Admin: the pool (answer to `Status`).
    Pool(Vec<MachineStatus>),
    /// Admin: the job was accepted (answer to `Submit`).
    Submitted {
        /// Its id.
        job: JobId,
    },
    /// Admin: the job was removed (answer to `RemoveJob`).
    Removed {
        /// The job.
        job: JobId,
    },
    /// Admin: the job queue (answer to `Queue`).
    Queue(Vec<JobStatus>),
    /// Admin: answer to `Analyze`.
    Analysis(JobAnalysis),
    /// Admin: every online machine's name and whole ad in new syntax (answer to `MachineAds`).
    Ads(Vec<(String, String)>),
    /// Admin: a request could not be honoured.
    AdminFailed(Failure),
    /// Admin: answer to [`ToGlobal::History`], oldest first.
    History(Vec<JobRecord>),
    /// Admin: the job is held (answer to `Hold`).
    Held {
        /// The job.
        job: JobId,
    },
    /// Admin: the job waits again (answer to `Release`).
    Released {
        /// The job.
        job: JobId,
    },
    /// Admin: answer to [`ToGlobal::Events`].
    Events {
        /// The job.
        job: JobId,
        /// Its events after the number asked for, oldest first.
        events: Vec<crate::events::JobEvent>,
        /// True once the job has ended: no event will follow.
        ended: bool,
        /// The submit file's `log =` (absolute, on the submit machine), where
        /// `carmi wait`, `carmi events` and `carmi submit` append these lines.
        #[serde(default)]
        log: Option<String>,
    },
    /// Admin: answer to [`ToGlobal::Logs`].
    Log {
        /// The job.
        job: JobId,
        /// What was read; `None` once the job has ended (its master's output
        /// is then what came back with it, [`ToGlobal::FetchFiles`]).
        chunk: Option<LogChunk>,
    },
    /// Read a running process's standard output or error from byte `offset`
    /// (at most [`crate::limits::MAX_LOG_CHUNK_BYTES`]); answered with
    /// [`ToGlobal::LogRead`].
    ReadLog {
        /// Number for the answer.
        request: u64,
        /// The process (a master).
        process: ProcessId,
        /// Which stream.
        stream: StdStream,
        /// First byte wanted.
        offset: u64,
    },
    /// Admin: answer to [`ToGlobal::FetchFiles`]: the files' bytes, in
    /// order, are the frame's payload.
    Files(JobFiles),
    /// Start a job's master on this machine, outside its slots (the submit
    /// side). Answered like `Spawn`, with `Started` and later `Exited`.
    SpawnMaster {
        /// The master process.
        process: ProcessId,
        /// Its job.
        job: JobId,
        /// What to run.
        executable: ExecutableRef,
        /// Arguments after `argv[0]`.
        args: Vec<String>,
        /// Environment on top of the local RM's (`CARMI_JOB` and `CARMI_PROCESS` are set too).
        env: Vec<(String, String)>,
        /// File for its standard output (absolute, on this machine); else kept with the job's output.
        output: Option<String>,
        /// File for its standard error (absolute, on this machine); else kept with the job's output.
        error: Option<String>,
        /// Files (absolute, on this machine) copied into its working directory before it starts.
        input_files: Vec<String>,
        /// Files of its sandbox to send back with [`ToGlobal::MasterFiles`]
        /// when it exits (`stdout` and `stderr` are its standard output and
        /// error when `output`/`error` are not given).
        #[serde(default)]
        return_files: Vec<String>,
        /// Files to put in its sandbox by content, fetched like an
        /// executable and named by their `name` (the `transfer_input_files`
        /// of a master placed away from its submit machine).
        #[serde(default)]
        inputs: Vec<ExecutableRef>,
    },
}

/// One machine of the pool, for `carmi status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineStatus {
    /// Machine name.
    pub name: String,
    /// Main attributes (Arch, OpSys, Memory, Cpus, Mips, KFlops, LoadAvg) as ClassAd text.
    pub attributes: Vec<(String, String)>,
    /// One entry per slot.
    pub slots: Vec<SlotStatus>,
}

/// One slot, for `carmi status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotStatus {
    /// Its host id.
    pub host: HostId,
    /// `idle`, `claimed`, `suspended` or `owner`.
    pub state: String,
    /// The job holding it, if any.
    pub job: Option<JobId>,
}

/// Application process -> application process, on a direct connection. The
/// message body is the frame payload, verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerMessage {
    /// Application-defined tag.
    pub tag: u32,
}
