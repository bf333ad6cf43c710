//! Requests that outlive their first answer (`AddHosts` waiting for hosts,
//! notify subscriptions, a `LookupProcess` waiting for its process to
//! connect) across a restart of the global RM (issue 15 item 3): each is
//! journaled with its body when accepted ([`Record::Outstanding`]), again
//! with the hosts still to come after each grant of an `AddHosts`, and when
//! it is answered in full, failed or cancelled ([`Record::Answered`]). When
//! the process that made one attaches again after a restart, the request is
//! served again as if nothing happened: an `AddHosts` asks for the hosts
//! still to come, a subscription starts again (its acceptance is not told
//! twice), a host of a `DeleteNotify` that left the job meanwhile is told
//! as deleted. A request journaled without its body (by an older version)
//! fails instead, naming it, never silence. Exclusions (`ExcludeHosts`) are
//! journaled and replayed at once: they change what the job is given, not an
//! answer it waits for.

use std::collections::{HashMap, HashSet};

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{Event, Failure, FailureCode, Request};

use crate::alloc::ReqRef;
use crate::journal::Record;
use crate::router::{Output, Router};

/// A request outstanding in this run.
struct LiveReq {
    job: JobId,
    what: String,
    body: Request,
}

/// A request a replay found outstanding, waiting for its process to attach.
struct LostReq {
    request: RequestId,
    what: String,
    body: Option<Box<Request>>,
}

/// The router's part: requests journaled as outstanding in this run, and
/// those a replay found outstanding, per process, until it attaches again.
#[derive(Default)]
pub(in crate::router) struct Outstanding {
    live: HashMap<ReqRef, LiveReq>,
    lost: HashMap<ProcessId, (JobId, Vec<LostReq>)>,
    /// The allocator's and the lookups' count of ended requests when `live`
    /// was last settled: while both stand still, every live request is
    /// still outstanding, and settling (a pass over all of them, after
    /// every input) is skipped.
    settled_at: Option<(u64, u64)>,
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
        Request::LookupProcess { process } => format!("LookupProcess of process {process}"),
        _ => return None,
    })
}

impl Router {
    /// What `body` is and a copy of it, if it may stay outstanding (asked
    /// before the request is dispatched, which consumes it).
    pub(in crate::router) fn outstanding_kind(body: &Request) -> Option<(String, Request)> {
        describe(body).map(|what| (what, body.clone()))
    }

    /// True while `req` waits for more than its first answer.
    fn still_outstanding(&self, job: JobId, req: ReqRef, body: &Request) -> bool {
        match body {
            Request::LookupProcess { process } => self.requests.lookups.is_waiting(*process, req),
            _ => self.alloc.is_outstanding_request(job, req),
        }
    }

    /// After the request was dispatched: journals it if it stays outstanding.
    pub(in crate::router) fn note_outstanding(
        &mut self,
        job: JobId,
        req: ReqRef,
        kind: Option<(String, Request)>,
    ) {
        let Some((what, body)) = kind else {
            return;
        };
        if !self.still_outstanding(job, req, &body) {
            return;
        }
        self.out.push(Output::Journal(Record::Outstanding {
            job,
            process: req.process,
            request: req.id,
            what: what.clone(),
            body: Some(Box::new(body.clone())),
        }));
        self.requests
            .outstanding
            .live
            .insert(req, LiveReq { job, what, body });
    }

    /// A group of hosts went to `req`: should the global RM restart, only
    /// the `remaining` hosts are asked for again.
    pub(in crate::router) fn note_granted(&mut self, req: ReqRef, remaining: u32) {
        let Some(live) = self.requests.outstanding.live.get_mut(&req) else {
            return;
        };
        let Request::AddHosts { count, .. } = &mut live.body else {
            return;
        };
        if remaining == 0 || *count == remaining {
            // Done (settled below), or nothing changed.
            return;
        }
        *count = remaining;
        self.out.push(Output::Journal(Record::Outstanding {
            job: live.job,
            process: req.process,
            request: req.id,
            what: live.what.clone(),
            body: Some(Box::new(live.body.clone())),
        }));
    }

    /// Checks that skipping a settle loses nothing: when the counts of ended
    /// requests stand where they were at the last settle, every live
    /// request is still outstanding (a path that ends a request without
    /// counting it would leave it journaled as outstanding forever).
    pub(in crate::router) fn check_outstanding(&self) {
        let ended = (self.alloc.requests_ended(), self.requests.lookups.ended());
        if self.requests.outstanding.settled_at != Some(ended) {
            return;
        }
        for (&req, live) in &self.requests.outstanding.live {
            assert!(
                self.still_outstanding(live.job, req, &live.body),
                "{req:?} ended without being counted, so it stays journaled as outstanding"
            );
        }
    }

    /// Journals the end of every outstanding request that no longer waits
    /// (answered in full, failed, cancelled, or dropped with its process or
    /// job). Called after effects were taken.
    pub(in crate::router) fn settle_outstanding(&mut self) {
        let ended = (self.alloc.requests_ended(), self.requests.lookups.ended());
        let settled = self.requests.outstanding.settled_at.replace(ended);
        if self.requests.outstanding.live.is_empty() || settled == Some(ended) {
            return;
        }
        let done: Vec<ReqRef> = self
            .requests
            .outstanding
            .live
            .iter()
            .filter(|&(&req, live)| !self.still_outstanding(live.job, req, &live.body))
            .map(|(&req, _)| req)
            .collect();
        for req in done {
            self.requests.outstanding.live.remove(&req);
            self.out.push(Output::Journal(Record::Answered {
                process: req.process,
                request: req.id,
            }));
        }
    }

    /// Replays an `Outstanding` record: its process is served again (or told
    /// of the loss) when it attaches again. A later record of the same
    /// request replaces the earlier one.
    pub(in crate::router) fn recover_outstanding(
        &mut self,
        job: JobId,
        process: ProcessId,
        request: RequestId,
        what: String,
        body: Option<Box<Request>>,
    ) {
        if !self.alloc.has_job(job) {
            return;
        }
        let entry = self
            .requests
            .outstanding
            .lost
            .entry(process)
            .or_insert_with(|| (job, Vec::new()));
        entry.1.retain(|l| l.request != request);
        entry.1.push(LostReq {
            request,
            what,
            body,
        });
    }

    /// Replays an `Answered` record.
    pub(in crate::router) fn recover_answered(&mut self, process: ProcessId, request: RequestId) {
        if let Some((_, list)) = self.requests.outstanding.lost.get_mut(&process) {
            list.retain(|l| l.request != request);
            if list.is_empty() {
                self.requests.outstanding.lost.remove(&process);
            }
        }
    }

    /// Forgets what a replay found outstanding for processes that are gone
    /// (their job ended or was held, or they exited).
    pub(in crate::router) fn forget_lost(
        &mut self,
        process: Option<ProcessId>,
        job: Option<JobId>,
    ) {
        if let Some(p) = process {
            self.requests.outstanding.lost.remove(&p);
        }
        if let Some(j) = job {
            self.requests
                .outstanding
                .lost
                .retain(|_, (job, _)| *job != j);
        }
    }

    /// A process attached again: each of its requests the journal held as
    /// outstanding before the restart is served again; one journaled without
    /// its body fails, naming it, so that the application asks again instead
    /// of waiting for ever.
    pub(in crate::router) fn tell_lost(&mut self, process: ProcessId) {
        let Some((job, lost)) = self.requests.outstanding.lost.remove(&process) else {
            return;
        };
        for LostReq {
            request,
            what,
            body,
        } in lost
        {
            let req = ReqRef {
                process,
                id: request,
            };
            match body {
                Some(body) => {
                    tracing::info!(%process, %request, "serving again a request outstanding before a restart: {what}");
                    self.serve_again(job, req, what, *body);
                }
                None => {
                    tracing::info!(%process, %request, "telling a process its request was lost in a restart");
                    let message = format!(
                        "the global RM restarted and lost request {request} ({what}); send it again"
                    );
                    self.fail_unavailable(process, request, message);
                    self.out
                        .push(Output::Journal(Record::Answered { process, request }));
                }
            }
        }
    }

    /// Serves `body` again for `req` as the restarted global RM knows the job now.
    fn serve_again(&mut self, job: JobId, req: ReqRef, what: String, mut body: Request) {
        // Hosts a notify named that left the job while the global RM was away.
        let mut gone: Vec<HostId> = Vec::new();
        if let Request::DeleteNotify { hosts }
        | Request::SuspendNotify { hosts }
        | Request::ResumeNotify { hosts } = &mut body
        {
            let alloc = &self.alloc;
            hosts.retain(|&h| {
                let held = alloc.host_class(job, h).is_some();
                if !held {
                    gone.push(h);
                }
                held
            });
        }
        if matches!(body, Request::DeleteNotify { .. }) {
            for host in &gone {
                // Its machine may not be back yet: the job must not get it
                // back silently after being told it left.
                self.alloc.forget_claim(*host, job);
                let event = Event::HostDeleted {
                    request: req.id,
                    host: *host,
                    reason: format!("{host} left the job while the global RM restarted"),
                };
                self.deliver(req.process, event);
            }
        }
        let subscription = matches!(
            body,
            Request::AddNotify { .. }
                | Request::DeleteNotify { .. }
                | Request::SuspendNotify { .. }
                | Request::ResumeNotify { .. }
        );
        let empty = matches!(&body, Request::DeleteNotify { hosts }
            | Request::SuspendNotify { hosts }
            | Request::ResumeNotify { hosts } if hosts.is_empty());
        if empty {
            // Nothing left to watch: it ends as it would have.
            self.out.push(Output::Journal(Record::Answered {
                process: req.process,
                request: req.id,
            }));
            return;
        }
        let kind = Some((what, body.clone()));
        self.dispatch(job, req, body);
        if subscription {
            // Its acceptance was told before the restart.
            self.alloc.drop_done(req);
        }
        self.note_outstanding(job, req, kind);
        if !self.requests.outstanding.live.contains_key(&req) {
            // Failed or answered at once: its end is journaled.
            self.out.push(Output::Journal(Record::Answered {
                process: req.process,
                request: req.id,
            }));
        }
    }

    /// Requests a local RM forwarded for the process at `conn` that had no
    /// event when its link broke. Those not waiting here (the global RM
    /// restarted before reading or journaling them, or read them and its
    /// answer was lost with the link) fail, naming them; those it still
    /// serves (outstanding, served again, a spawn whose process is
    /// expected) are left alone.
    pub(in crate::router) fn unanswered(
        &mut self,
        name: &str,
        conn: ConnId,
        requests: Vec<RequestId>,
    ) {
        let Some(process) = self.procs.attached_at(name, conn) else {
            return;
        };
        let spawning: HashSet<RequestId> = self
            .procs
            .of_job(self.procs.find(process).expect("attached").job)
            .into_iter()
            .filter_map(|p| self.procs.find(p).and_then(|pr| pr.origin))
            .filter(|o| o.process == process)
            .map(|o| o.id)
            .collect();
        for request in requests {
            let req = ReqRef {
                process,
                id: request,
            };
            if self.requests.outstanding.live.contains_key(&req) || spawning.contains(&request) {
                continue;
            }
            tracing::info!(%process, %request, "failing a request forwarded before a restart and never read");
            let message = format!(
                "the link to the global RM broke (it restarted or was unreachable) before request {request} was answered; send it again"
            );
            self.fail_unavailable(process, request, message);
        }
    }

    /// Fails `request` of `process` as unavailable: it was lost, and the
    /// process may send it again.
    fn fail_unavailable(&mut self, process: ProcessId, request: RequestId, message: String) {
        let failure = Failure {
            code: FailureCode::Unavailable,
            message,
        };
        self.deliver(process, Event::Failed { request, failure });
    }
}
