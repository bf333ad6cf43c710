//! `carmi hold` and `carmi release` at the router: a held job's master and
//! processes are killed and its hosts go back (the allocator keeps its place
//! in the queue); a released one waits again, and its master starts from
//! scratch when its minimums are met, as after a vacate. Both are journaled,
//! so a restarted global RM keeps a held job held.

use carmi_proto::events::EventKind;
use carmi_proto::ids::JobId;
use carmi_proto::limits;
use carmi_proto::msg::{Failure, FailureCode, FromGlobal};
use tracing::info;

use super::class_limits;
use crate::journal::Record;
use crate::router::{LinkId, Output, Router};

impl Router {
    /// `carmi hold`.
    pub(in crate::router) fn hold(
        &mut self,
        link: LinkId,
        job: JobId,
        reason: Option<String>,
        user: &str,
    ) {
        match self.hold_one(job, reason, user) {
            Ok(()) => self.send(link, FromGlobal::Held { job }),
            Err(f) => self.admin_fail(link, f.code, f.message),
        }
    }

    /// `carmi hold C`: every proc of the cluster not held already.
    pub(in crate::router) fn hold_cluster(
        &mut self,
        link: LinkId,
        cluster: JobId,
        reason: Option<String>,
        user: &str,
    ) {
        let jobs = match self.cluster_jobs(cluster) {
            Ok(jobs) => jobs,
            Err(message) => return self.admin_fail(link, FailureCode::Invalid, message),
        };
        let mut held = 0;
        let mut last = None;
        for job in jobs {
            match self.hold_one(job, reason.clone(), user) {
                Ok(()) => held += 1,
                Err(f) => last = Some(f),
            }
        }
        match last {
            Some(f) if held == 0 => self.admin_fail(link, f.code, f.message),
            _ => self.send(link, FromGlobal::Held { job: cluster }),
        }
    }

    /// Holds `job` for `reason` (else "held by USER").
    fn hold_one(&mut self, job: JobId, reason: Option<String>, user: &str) -> Result<(), Failure> {
        self.alloc.hold_job(job)?;
        let reason = match reason.filter(|r| !r.trim().is_empty()) {
            Some(r) => limits::cut_reason(&r),
            None => limits::cut_reason(&format!("held by {user}")),
        };
        info!(job = %job, reason, "job held");
        self.out.push(Output::Journal(Record::Held {
            job,
            reason: reason.clone(),
        }));
        self.stop_job_processes(job);
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = Some(reason.clone());
        }
        self.log_event(job, EventKind::Held { reason });
        Ok(())
    }

    /// Holds a waiting job submitted with `on_impossible = hold` that the
    /// pool cannot start, at submit or once the pool shrank (`router/shrink.rs`),
    /// giving why as the reason (`carmi release` once the pool grew).
    pub(in crate::router) fn hold_at_submit(&mut self, job: JobId, why: &str) {
        if let Err(f) = self.alloc.hold_job(job) {
            tracing::warn!(job = %job, "cannot hold the job at submit: {}", f.message);
            return;
        }
        self.held_by_pool(job, &format!("{why} (on_impossible = hold)"));
    }

    /// Holds a job for a reason of the pool rather than a user's (its
    /// master failed to start too often, `router/requeue.rs`): its hosts go
    /// back and its processes are killed, as with `carmi hold`.
    pub(in crate::router) fn hold_by_pool(&mut self, job: JobId, why: &str) {
        if let Err(f) = self.alloc.hold_job(job) {
            tracing::warn!(job = %job, "cannot hold the job: {}", f.message);
            return;
        }
        self.stop_job_processes(job);
        self.held_by_pool(job, why);
    }

    /// Journals and tells that `job`, held in the allocator already, is
    /// held for `why`.
    pub(in crate::router) fn held_by_pool(&mut self, job: JobId, why: &str) {
        let reason = limits::cut_reason(why);
        info!(job = %job, reason, "job held by the pool");
        self.out.push(Output::Journal(Record::Held {
            job,
            reason: reason.clone(),
        }));
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = Some(reason.clone());
        }
        self.log_event(job, EventKind::Held { reason });
    }

    /// `carmi release`.
    pub(in crate::router) fn release(&mut self, link: LinkId, job: JobId) {
        match self.release_one(job) {
            Ok(()) => self.send(link, FromGlobal::Released { job }),
            Err(f) => self.admin_fail(link, f.code, f.message),
        }
    }

    /// `carmi release C`: every held proc of the cluster.
    pub(in crate::router) fn release_cluster(&mut self, link: LinkId, cluster: JobId) {
        let jobs = match self.cluster_jobs(cluster) {
            Ok(jobs) => jobs,
            Err(message) => return self.admin_fail(link, FailureCode::Invalid, message),
        };
        let held: Vec<JobId> = jobs
            .into_iter()
            .filter(|j| self.jobs.submitted.get(j).is_some_and(|s| s.held.is_some()))
            .collect();
        if held.is_empty() {
            let message = format!("cluster {} has no held job", cluster.0);
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        let mut last = None;
        for job in held {
            if let Err(f) = self.release_one(job) {
                last = Some(f);
            }
        }
        match last {
            Some(f) => self.admin_fail(link, f.code, f.message),
            None => self.send(link, FromGlobal::Released { job: cluster }),
        }
    }

    fn release_one(&mut self, job: JobId) -> Result<(), Failure> {
        let Some(spec) = self.jobs.submitted.get(&job).map(|s| s.spec.clone()) else {
            let message = format!(
                "job {} is not a submitted job in the queue (it ended, never existed, or was started by hand)",
                job.0
            );
            return Err(Failure {
                code: FailureCode::Invalid,
                message,
            });
        };
        self.alloc.release_job(job, &class_limits(&spec))?;
        info!(job = %job, "job released");
        self.out.push(Output::Journal(Record::Released { job }));
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = None;
        }
        self.log_event(job, EventKind::Released);
        Ok(())
    }

    /// Kills the master and every process of a job that stays in the queue
    /// (held): they are forgotten at once, so that whatever they still send
    /// or whatever is reported of them later concerns no live process.
    pub(in crate::router) fn stop_job_processes(&mut self, job: JobId) {
        // The allocator released the hosts; the processes on them are ours to kill.
        self.flush();
        if let Some(p) = self
            .jobs
            .submitted
            .get_mut(&job)
            .and_then(|s| s.master.take())
        {
            self.jobs.unplaced.remove(&p);
            let machine = self.jobs.masters.remove(&p).map(|(_, m)| m);
            if self.jobs.sent_masters.remove(&p)
                && let Some(link) = machine.and_then(|m| self.registry.ready_link(&m))
            {
                self.send(link, FromGlobal::Kill { process: p });
            }
        }
        for p in self.procs.of_job(job) {
            let Some(proc) = self.procs.remove(p) else {
                continue;
            };
            self.jobs.recovered.remove(&p);
            self.requests.lookups.take(p);
            self.requests.parked.remove(&p);
            self.alloc.on_requester_gone(p);
            self.kill_if_live(p, &proc);
        }
    }

    /// Replays a `Held` record: the job (waiting, or running with its master
    /// expected back) is held again and its processes are forgotten (they
    /// were killed when it was held).
    pub(in crate::router) fn recover_held(&mut self, job: JobId, reason: String) {
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return;
        };
        sub.held = Some(reason);
        if let Some(p) = sub.master.take() {
            self.jobs.forget_master(p);
        }
        for p in self.procs.of_job(job) {
            self.procs.remove(p);
            self.jobs.recovered.remove(&p);
        }
        if let Err(f) = self.alloc.hold_job(job) {
            tracing::warn!(job = %job, "journal: cannot hold the job again: {}", f.message);
        }
    }

    /// Replays a `Released` record.
    pub(in crate::router) fn recover_released(&mut self, job: JobId) {
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return;
        };
        sub.held = None;
        let limits = class_limits(&sub.spec);
        if let Err(f) = self.alloc.release_job(job, &limits) {
            tracing::warn!(job = %job, "journal: cannot release the job again: {}", f.message);
        }
    }
}
