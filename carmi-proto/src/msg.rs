//! Protocol messages, typed by direction.
//!
//! Three kinds of connection exist, each opened by a handshake
//! (the handshake, `carmi_api::handshake`) that names its [`Role`]:
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
//! payload, next to the header (see `carmi_api::frame`). A message that carries
//! a payload says so in its documentation.
//!
//! `docs/protocol.md` (repository root) describes these messages for
//! implementers: when each is sent and what answers it. Change both together.
//!
//! The connection-level enums live here; the types an application uses
//! (requests, replies, events) are in `app`, and the reports admin tools read
//! (jobs, history, machines) in `admin`. Both are re-exported, so every type
//! is `carmi_api::msg::X` whichever file holds it.

mod admin;
mod app;
mod control;
mod pilot;
pub mod relay;

pub use admin::{
    ClassAnalysis, ClassStatus, JobAnalysis, JobFiles, JobRecord, JobStatus, JobUsage, LogChunk,
    MachineStatus, ReturnedFile, SlotStatus, StageStats, SubmitRequest, UserPrio, UserPrioRequest,
    UserShare,
};
pub use app::{
    ClassDef, Event, Failure, FailureCode, HostInfo, OutputFrame, OutputMode, OutputRoute,
    ProcessInfo, ProcessState, Reply, Request, SpawnTarget, StdStream,
};
// Shared with modules below this one (the event log, executables, submit
// files), so defined there and named here too.
pub use crate::exe::ExecutableRef;
pub use crate::outcome::{
    ExitStatus, JobEnd, ProcessUsage, Requests, StartFault, exec_failure, start_fault,
};
pub use control::{FromLocalControl, OwnerEvent, ToLocalControl};
pub use pilot::{AllocAnswer, AllocQueueSpec, AllocQueueStatus, AllocRequest, AllocationStatus};

use serde::{Deserialize, Serialize};

use crate::ids::{ConnId, HostId, JobId, ProcessId, RequestId};

/// Version of this protocol; both sides of a handshake must agree. 2:
/// tokens are shown by a holder's proof after the server's own proof
/// (`carmi_api::proof`), so a daemon or client of version 1 is told so in
/// words instead of failing on a message it does not expect.
pub const PROTOCOL_VERSION: u32 = 2;

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
    /// (`carmi_api::stage`): a local RM from a peer local RM or from the global RM.
    Stager {
        /// The fetching machine's name, for logs.
        name: String,
    },
    /// A relay (`carmi-relay`) carrying many local RMs' links to the global
    /// RM over this one connection ([`relay`]).
    Relay {
        /// The relay's name, for logs and its certificate.
        name: String,
    },
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
    /// The process's job has ended: the local RM closes the connection
    /// after this (see [`FromGlobal::JobGone`]).
    JobEnded {
        /// The job.
        job: JobId,
        /// Why, for people.
        reason: String,
    },
    /// The global RM refused this process (sent instead of `Attached`):
    /// starting a new job needs a token with power `submit`. The local RM
    /// closes the connection after this.
    Refused {
        /// Why, naming the identity, the action and the missing power.
        reason: String,
    },
    /// The job's credential (sent before `Attached` to a process that
    /// connected with the pool secret): what its processes prove to each
    /// other and to their local RMs, good for this job only. The text is
    /// what a credential file holds (`carmi_api::jobcred`).
    Credential {
        /// The job it opens.
        job: JobId,
        /// The credential file's text.
        credential: String,
    },
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
        /// The token the process presented to its local RM, passed on for
        /// a new job (`job` absent) only: the global RM, which knows the
        /// revocations, checks that it may submit and makes its identity
        /// the job's owner. Absent for a process of a known job, which
        /// proved that job's credential.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// An application process disconnected.
    AppDetach {
        /// The connection.
        conn: ConnId,
    },
    /// Requests forwarded on `conn` that had no event yet when the
    /// connection to the global RM broke, sent after the `AppAttach` that
    /// announces `conn` again: a global RM that restarted fails, naming it,
    /// each one it no longer knows, so that no application waits for an
    /// answer that will never come. (A global RM older than this message
    /// refuses it as undecodable.)
    Unanswered {
        /// The connection.
        conn: ConnId,
        /// The requests, in the order they were forwarded.
        requests: Vec<RequestId>,
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
        /// Its peak memory, and whether it went over its `request_memory`
        /// (absent from older local RMs: not measured).
        #[serde(default)]
        usage: ProcessUsage,
    },
    /// The owner policy vacates this machine (`PREEMPT`): `process` got
    /// SIGTERM and the vacate grace, and its `Exited` follows. Sent so that
    /// the global RM puts a master's job back in the queue instead of taking
    /// the signal for the job's end.
    Vacating {
        /// The process.
        process: ProcessId,
    },
    /// The owner policy changed a slot's state.
    SlotState {
        /// Slot number (0-based) on this machine.
        slot: u32,
        /// New state.
        state: SlotActivity,
    },
    /// The local RM is going away for good (it was told to stop: a pilot's
    /// batch job cancelled, a machine shut down), sent before it kills its
    /// processes: the global RM declares the machine lost at once, so that
    /// the applications hear that their hosts are gone (rather than seeing
    /// their processes die one by one and the machine fall silent later).
    /// The global RM closes the connection when it has acted on it. (A
    /// global RM older than this message refuses it as undecodable, which
    /// also closes the connection.)
    Leaving {
        /// Why, for the global RM's log and the applications' events.
        reason: String,
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
        /// `job` names a cluster: every proc of it (`carmi CMD C`).
        #[serde(default)]
        cluster: bool,
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
    /// listener, `carmi_api::stage`); sent after every `Registered`. A local RM
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
        /// `job` names a cluster: every proc of it (`carmi hold C`).
        #[serde(default)]
        cluster: bool,
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
        /// `job` names a cluster: every proc of it (`carmi CMD C`).
        #[serde(default)]
        cluster: bool,
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
    /// Admin: create, list or revoke tokens (`carmi token`). Answered with
    /// [`FromGlobal::Tokens`] or [`FromGlobal::AdminFailed`].
    Tokens(crate::authz::TokenRequest),
    /// Admin: manage allocation queues (`carmi alloc`, pilots from a batch
    /// system). Answered with [`FromGlobal::Alloc`] or [`FromGlobal::AdminFailed`].
    Alloc(AllocRequest),
    /// Admin: the fair-share users, or set one's priority factor (`carmi
    /// userprio`). Answered by `Users`, or `AdminFailed`.
    UserPrio(UserPrioRequest),
    /// Answer to each [`FromGlobal::TokenRenewed`], in order: `saved` if the
    /// new token is in the token file (the replaced ones may be revoked).
    TokenTaken {
        /// False: in memory only (the file's token is left to expire).
        saved: bool,
    },
    /// A local RM's key, for the global RM to certify as its machine's
    /// (`carmi_api::machinecert`): answered by `MachineCertified`.
    CertifyMachine {
        /// The key (`PublicKey::to_text`).
        key: String,
    },
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
    /// Answer to an `AppAttach` that is refused (a new job without a token
    /// that may submit): the local RM tells the application
    /// [`FromLocal::Refused`] and closes that connection only.
    AttachRefused {
        /// The connection.
        conn: ConnId,
        /// Why, naming the identity, the action and the missing power.
        reason: String,
    },
    /// The job of the application on `conn` has ended (while it was
    /// attached, or before a reconnection announced it again): the local RM
    /// fails its unanswered requests with `reason`, tells it
    /// [`FromLocal::JobEnded`] and closes its connection, so that it never
    /// waits for answers that cannot come.
    JobGone {
        /// The connection.
        conn: ConnId,
        /// The job that ended.
        job: JobId,
        /// Why, for people (`job j1 ended: its master's machine m0 was lost`).
        reason: String,
    },
    /// An event for an application process connected here.
    Deliver {
        /// The connection.
        conn: ConnId,
        /// The event.
        event: Event,
    },
    /// The credential of `job` (sent before each `Spawn`, `SpawnMaster` and
    /// `Attached` of the job): the local RM writes it into the sandboxes of
    /// the job's processes instead of the pool secret, admits it on its
    /// listener for that job only, and forgets it when the job has no
    /// process or application left on the machine.
    JobCredential {
        /// The job.
        job: JobId,
        /// The credential file's text (`carmi_api::jobcred`).
        credential: String,
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
        /// The job's `request_memory` and `request_cpus`, which the local RM
        /// binds the process to (absent from older global RMs: not bound).
        #[serde(default)]
        requests: Requests,
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
    /// connection (`carmi_api::stage`), then report with [`ToGlobal::Fetched`].
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
    /// Admin: the pool (answer to `Status`). Shared: the global RM keeps
    /// each machine's status until it changes (on the wire, a list).
    Pool(Vec<std::sync::Arc<MachineStatus>>),
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
    /// The ad texts are shared with the global RM's tables (on the wire, strings).
    Ads(Vec<(String, std::sync::Arc<str>)>),
    /// Admin: a request could not be honoured.
    AdminFailed(Failure),
    /// Answer to [`ToGlobal::UserPrio`]: every user with usage or a factor,
    /// best priority first.
    Users(Vec<UserPrio>),
    /// Answer to [`ToGlobal::Tokens`].
    Tokens(crate::authz::TokenAnswer),
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
    /// Admin: answer to [`ToGlobal::Alloc`].
    Alloc(AllocAnswer),
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
        /// The job's `request_memory` and `request_cpus`: HTCondor binds the
        /// whole job, so the master is bound like its workers.
        #[serde(default)]
        requests: Requests,
    },
    /// This machine's daemon token renewed (new id, same lifetime), which the
    /// link now stands on: presented from now on, answered by `TokenTaken`.
    TokenRenewed {
        /// The token's text (opaque to the local RM).
        token: String,
    },
    /// The certificate of this machine's key, signed with the pool's key.
    MachineCertified {
        /// Its text (`carmi_api::machinecert`).
        cert: String,
    },
}

/// Application process -> application process, on a direct connection. The
/// message body is the frame payload, verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerMessage {
    /// Application-defined tag.
    pub tag: u32,
}
