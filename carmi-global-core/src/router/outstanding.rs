//! Requests that outlive their first answer (`AddHosts` waiting for hosts,
//! notify subscriptions) across a restart of the global RM (issue 15 item
//! 3): each is journaled when accepted ([`Record::Outstanding`]) and when it
//! is answered in full, failed or cancelled ([`Record::Answered`]). A
//! restarted global RM cannot serve them again (its pool and the job's
//! hosts are rebuilt as machines come back), so when the process that made
//! one attaches again it gets a failure naming the request, never silence.
//! Exclusions (`ExcludeHosts`) are journaled and replayed instead: they
//! change what the job is given, not an answer it waits for.

use std::collections::HashMap;

use carmi_proto::ids::{JobId, ProcessId, RequestId};
use carmi_proto::msg::{Event, Failure, FailureCode, Request};

use super::{Output, Router};
use crate::alloc::ReqRef;
use crate::journal::Record;

/// The router's part: requests journaled as outstanding in this run, and
/// those a replay found outstanding, per process, until it attaches again.
#[derive(Default)]
pub(super) struct Outstanding {
    live: HashMap<ReqRef, JobId>,
    lost: HashMap<ProcessId, (JobId, Vec<(RequestId, String)>)>,
}

/// What a request is, for the failure message; `None` for one that never
/// stays outstanding.
fn describe(body: &Request) -> Option<String> {
    Some(match body {
        Request::AddHosts { class, count, .. } => {
            format!("AddHosts of {count} host(s) of class `{class}`")
        }
        Request::AddNotify { class } => format!("AddNotify of class `{class}`"),
        Request::DeleteNotify { hosts } => format!("DeleteNotify of {} host(s)", hosts.len()),
        Request::SuspendNotify { hosts } => format!("SuspendNotify of {} host(s)", hosts.len()),
        Request::ResumeNotify { hosts } => format!("ResumeNotify of {} host(s)", hosts.len()),
        _ => return None,
    })
}

impl Router {
    /// After the allocator took `body`: journals it if it stays outstanding.
    pub(super) fn note_outstanding(&mut self, job: JobId, req: ReqRef, body_was: Option<String>) {
        let Some(what) = body_was else {
            return;
        };
        if !self.alloc.is_outstanding_request(job, req) {
            return;
        }
        self.outstanding.live.insert(req, job);
        self.out.push(Output::Journal(Record::Outstanding {
            job,
            process: req.process,
            request: req.id,
            what,
        }));
    }

    /// What `body` is, if it may stay outstanding (asked before the
    /// allocator consumes it).
    pub(super) fn outstanding_kind(body: &Request) -> Option<String> {
        describe(body)
    }

    /// Journals the end of every outstanding request the allocator no
    /// longer holds (answered in full, failed, cancelled, or dropped with
    /// its process or job). Called after effects were taken.
    pub(super) fn settle_outstanding(&mut self) {
        if self.outstanding.live.is_empty() {
            return;
        }
        let done: Vec<ReqRef> = self
            .outstanding
            .live
            .iter()
            .filter(|&(&req, &job)| !self.alloc.is_outstanding_request(job, req))
            .map(|(&req, _)| req)
            .collect();
        for req in done {
            self.outstanding.live.remove(&req);
            self.out.push(Output::Journal(Record::Answered {
                process: req.process,
                request: req.id,
            }));
        }
    }

    /// Replays an `Outstanding` record: its process hears of the loss when
    /// it attaches again.
    pub(super) fn recover_outstanding(
        &mut self,
        job: JobId,
        process: ProcessId,
        request: RequestId,
        what: String,
    ) {
        if !self.alloc.has_job(job) {
            return;
        }
        let entry = self
            .outstanding
            .lost
            .entry(process)
            .or_insert_with(|| (job, Vec::new()));
        entry.1.push((request, what));
    }

    /// Replays an `Answered` record.
    pub(super) fn recover_answered(&mut self, process: ProcessId, request: RequestId) {
        if let Some((_, list)) = self.outstanding.lost.get_mut(&process) {
            list.retain(|(r, _)| *r != request);
            if list.is_empty() {
                self.outstanding.lost.remove(&process);
            }
        }
    }

    /// Forgets what a replay found outstanding for processes that are gone
    /// (their job ended or was held, or they exited).
    pub(super) fn forget_lost(&mut self, process: Option<ProcessId>, job: Option<JobId>) {
        if let Some(p) = process {
            self.outstanding.lost.remove(&p);
        }
        if let Some(j) = job {
            self.outstanding.lost.retain(|_, (job, _)| *job != j);
        }
    }

    /// A process attached again: each of its requests the journal held as
    /// outstanding before the restart fails now, naming it, so that the
    /// application asks again instead of waiting for ever.
    pub(super) fn tell_lost(&mut self, process: ProcessId) {
        let Some((_, lost)) = self.outstanding.lost.remove(&process) else {
            return;
        };
        for (request, what) in lost {
            tracing::info!(%process, %request, "telling a process its request was lost in a restart");
            let failure = Failure {
                code: FailureCode::Unavailable,
                message: format!(
                    "the global RM restarted and lost request {request} ({what}); send it again"
                ),
            };
            self.deliver(process, Event::Failed { request, failure });
            self.out
                .push(Output::Journal(Record::Answered { process, request }));
        }
    }
}
