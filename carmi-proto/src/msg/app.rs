//! What an application process and CARMI say to each other: the service
//! requests of Appendix A, their replies and events, and the types they carry
//! (hosts, processes, classes, failures, spawned processes' output).
//!
//! Kept apart from the connection-level messages in [`super`] because the
//! client library and applications use these types, while the daemons'
//! wire enums only wrap them. Re-exported from [`crate::msg`].

use serde::{Deserialize, Serialize};

use super::{ExecutableRef, ExitStatus};
use crate::ids::{HostId, ProcessId, RequestId};

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
    /// Stream to the requester over a direct connection ([`Role::Output`](super::Role::Output)).
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

/// A frame on a [`Role::Output`](super::Role::Output) connection, local RM -> requester.
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
    /// The specification's `process_info`: every process of the job (host,
    /// parent, executable, state), answered with [`Reply::Processes`].
    Processes,
    /// Class names and expressions of the job.
    GetClassDefinitions,
    /// Publishes attributes of the running job for the people watching it
    /// (`carmi q --json`, the dashboard), as HTCondor jobs do with `chirp
    /// set_job_attr`: each `(name, ClassAd value text)` replaces the job's
    /// attribute of that name, others stay. WoDi reports its cycles this
    /// way. Held by the global RM while the job runs, not journaled: a
    /// running application sets them again. Answered with [`Reply::Ok`].
    SetJobAttrs {
        /// Attribute names (ClassAd identifiers) and value texts.
        attrs: Vec<(String, String)>,
    },
    /// Define a resource class of the job. A name the job already has fails
    /// with [`FailureCode::ClassExists`] (the specification answers false)
    /// unless `replace` asks to redefine it.
    DefineClass {
        /// Class name.
        name: String,
        /// ClassAd expression over machine attributes.
        expression: String,
        /// ClassAd expression rating a matching machine (`TARGET` is the job
        /// ad): higher is taken first, the fastest among equals; absent: speed alone.
        #[serde(default)]
        rank: Option<String>,
        /// Redefine the class if the job has it already (absent: false, so a
        /// duplicate name fails as the specification says).
        #[serde(default)]
        replace: bool,
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
    /// The process whose `ClassSpawn` started it; `None` for the job's first
    /// process. Absent in answers from older global RMs.
    #[serde(default)]
    pub parent: Option<ProcessId>,
    /// The name of the executable it runs, when the global RM knows it (not
    /// for a first process started by hand). Absent from older global RMs.
    #[serde(default)]
    pub executable: Option<String>,
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
    /// The connection's identity lacks the power this request needs (the
    /// message names identity, action and missing power).
    Denied,
    /// `DefineClass` of a name the job already has, without `replace`.
    ClassExists,
}

/// Successful outcome of a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Done, nothing to report (`DefineClass`, `RemoveClass`,
    /// `ExcludeHosts`, `CancelRequest`, and a subscription being registered).
    Ok,
    /// `Config`.
    Hosts(Vec<HostInfo>),
    /// `GetHostInfo`.
    Host(HostInfo),
    /// `ProcessInfo`.
    Process(ProcessInfo),
    /// `Processes`: every process of the job, by id.
    Processes(Vec<ProcessInfo>),
    /// `DelHosts`: the hosts given back (each once; all those asked for,
    /// as the request is all or nothing).
    HostsRemoved(Vec<HostId>),
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
