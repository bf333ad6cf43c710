//! What the allocator's inputs cause, and how it reaches applications.

use carmi_proto::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{Event, Failure, FailureCode, HostInfo, Reply};
use serde::{Deserialize, Serialize};

/// A request as the allocator knows it: the process that made it and the id
/// that process chose (ids are unique only within one process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReqRef {
    /// The process that made the request, and that receives its events.
    pub process: ProcessId,
    /// The id the process chose.
    pub id: RequestId,
}

/// Why a host left a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseCause {
    /// The job gave it back with `DelHosts`; its processes must be killed.
    Deleted,
    /// The owner stayed: the local RM killed the processes.
    Vacated,
    /// The machine stopped answering.
    Lost,
    /// The machine re-advertised with fewer slots.
    Withdrawn,
    /// The job ended; its processes must be killed.
    JobEnded,
    /// Taken back from a job above its minimum, for another job's minimum or
    /// fair share; its processes must be killed.
    Preempted,
    /// The job was held (`carmi hold`): every host goes back and every
    /// process of the job is killed.
    Held,
}

impl ReleaseCause {
    /// Why, for people, naming the host.
    pub fn reason(self, host_name: &str) -> String {
        match self {
            ReleaseCause::Deleted => format!("{host_name} was given back with DelHosts"),
            ReleaseCause::Vacated => format!("the owner of {host_name} reclaimed it"),
            ReleaseCause::Lost => format!("the machine of {host_name} stopped answering"),
            ReleaseCause::Withdrawn => {
                format!("{host_name} was withdrawn: its machine now offers fewer slots")
            }
            ReleaseCause::JobEnded => format!("the job holding {host_name} ended"),
            ReleaseCause::Held => format!("the job holding {host_name} was held"),
            ReleaseCause::Preempted => format!(
                "{host_name} was above the job's minimum and went to another job (fair share)"
            ),
        }
    }
}

/// What an input caused. Effects addressed to a request become [`Event`]s for
/// the process that made it ([`Effect::to_event`]); [`Effect::Released`] is for
/// the driver, which owns the processes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Effect {
    /// A group of hosts for an `AddHosts` request.
    Grant {
        /// The job.
        job: JobId,
        /// The `AddHosts` request.
        request: ReqRef,
        /// The hosts of this group.
        hosts: Vec<HostInfo>,
        /// Hosts of the request still to come.
        remaining: u32,
    },
    /// A host of a class joined the job (for an `AddNotify` subscription).
    Added {
        /// The job.
        job: JobId,
        /// The `AddNotify` request.
        request: ReqRef,
        /// The host.
        host: HostInfo,
    },
    /// A host left the job (for a `DeleteNotify` subscription).
    Deleted {
        /// The job.
        job: JobId,
        /// The `DeleteNotify` request.
        request: ReqRef,
        /// The host.
        host: HostId,
        /// Why, for people.
        reason: String,
    },
    /// A host of the job was suspended (for a `SuspendNotify` subscription).
    Suspended {
        /// The job.
        job: JobId,
        /// The `SuspendNotify` request.
        request: ReqRef,
        /// The host.
        host: HostId,
    },
    /// A host of the job resumed (for a `ResumeNotify` subscription).
    Resumed {
        /// The job.
        job: JobId,
        /// The `ResumeNotify` request.
        request: ReqRef,
        /// The host.
        host: HostId,
    },
    /// A request completed.
    Done {
        /// The job.
        job: JobId,
        /// The request.
        request: ReqRef,
        /// Its result.
        reply: Reply,
    },
    /// A request failed or was cancelled.
    Failed {
        /// The job.
        job: JobId,
        /// The request.
        request: ReqRef,
        /// Why.
        failure: Failure,
    },
    /// A submitted job's minimums are held: the driver starts its master.
    JobStarted {
        /// The job.
        job: JobId,
    },
    /// A host is no longer the job's: the driver deals with the processes on it.
    Released {
        /// The job that held it.
        job: JobId,
        /// The host.
        host: HostId,
        /// Why.
        cause: ReleaseCause,
    },
}

impl Effect {
    /// The event this effect delivers and the process it goes to; `None` for
    /// [`Effect::Released`] and [`Effect::JobStarted`], which concern processes
    /// rather than a request.
    pub fn to_event(&self) -> Option<(ProcessId, Event)> {
        let (to, event) = match self {
            Effect::Grant {
                request,
                hosts,
                remaining,
                ..
            } => (
                request,
                Event::HostsAdded {
                    request: request.id,
                    hosts: hosts.clone(),
                    remaining: *remaining,
                },
            ),
            Effect::Added { request, host, .. } => (
                request,
                Event::HostsAdded {
                    request: request.id,
                    hosts: vec![host.clone()],
                    remaining: 0,
                },
            ),
            Effect::Deleted {
                request,
                host,
                reason,
                ..
            } => (
                request,
                Event::HostDeleted {
                    request: request.id,
                    host: *host,
                    reason: reason.clone(),
                },
            ),
            Effect::Suspended { request, host, .. } => (
                request,
                Event::HostSuspended {
                    request: request.id,
                    host: *host,
                },
            ),
            Effect::Resumed { request, host, .. } => (
                request,
                Event::HostResumed {
                    request: request.id,
                    host: *host,
                },
            ),
            Effect::Done { request, reply, .. } => (
                request,
                Event::Done {
                    request: request.id,
                    reply: reply.clone(),
                },
            ),
            Effect::Failed {
                request, failure, ..
            } => (
                request,
                Event::Failed {
                    request: request.id,
                    failure: failure.clone(),
                },
            ),
            Effect::Released { .. } | Effect::JobStarted { .. } => return None,
        };
        Some((to.process, event))
    }
}

/// A change of the hosts a job holds, for the job's event log (`carmi
/// events`): collected apart from [`Effect`]s, which go to applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostChange {
    /// The job.
    pub job: JobId,
    /// The host.
    pub host: HostId,
    /// What happened to it.
    pub kind: HostChangeKind,
}

/// What happened to a job's host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostChangeKind {
    /// The job was given it (at its start, by growth or for a request).
    Added,
    /// Its owner came back: the job's processes there are stopped.
    Suspended,
    /// Its owner left again: the job's processes there run again.
    Resumed,
    /// It left the job, and why.
    Removed(ReleaseCause),
}

/// What inputs caused since it was last taken, in order.
#[derive(Default)]
pub(super) struct Outputs {
    pub(super) effects: Vec<Effect>,
    /// Host changes of jobs, for their logs.
    pub(super) host_changes: Vec<HostChange>,
    /// Subscriptions ended and jobs forgotten so far (see
    /// [`super::Allocator::requests_ended`]).
    pub(super) requests_ended: u64,
}

impl Outputs {
    /// Fails `request` of `job`.
    pub(super) fn fail(&mut self, job: JobId, request: ReqRef, code: FailureCode, message: String) {
        self.effects.push(Effect::Failed {
            job,
            request,
            failure: Failure { code, message },
        });
    }

    /// Answers `request` of `job`.
    pub(super) fn done(&mut self, job: JobId, request: ReqRef, reply: Reply) {
        self.effects.push(Effect::Done {
            job,
            request,
            reply,
        });
    }

    /// Tells each of `watchers` (`AddNotify` subscriptions of `job`) of
    /// each of `hosts`.
    pub(super) fn added(&mut self, job: JobId, watchers: &[ReqRef], hosts: &[HostInfo]) {
        for &request in watchers {
            for info in hosts {
                self.effects.push(Effect::Added {
                    job,
                    request,
                    host: info.clone(),
                });
            }
        }
    }

    /// Notes a change of `job`'s hosts for its log.
    pub(super) fn host_change(&mut self, job: JobId, host: HostId, kind: HostChangeKind) {
        self.host_changes.push(HostChange { job, host, kind });
    }
}
