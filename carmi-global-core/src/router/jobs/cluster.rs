//! Clusters of procs. One `carmi submit` is one cluster, as in HTCondor: a
//! file with `queue 3` (or `queue .. from`, several `queue` statements)
//! makes procs `C.0`, `C.1`, `C.2`, each a job of its own with the job ids
//! `C`, `C+1`, `C+2`, given together so that `C` is both the cluster's id
//! and its proc 0's job id, and `$(ClusterId)` means the same in every proc.
//! A cluster is accepted whole or refused whole: no id is spent and nothing
//! journaled for a refused one. `carmi rm C`, `hold C` and `release C` act on
//! every proc of the cluster still in the queue.

use carmi_proto::events::EventKind;
use carmi_proto::ids::JobId;
use carmi_proto::limits;
use carmi_proto::msg::{Failure, FailureCode, FromGlobal, JobEnd, SubmitRequest};
use carmi_proto::submit::{JobSpec, OnImpossible};
use classad::ClassAd;
use tracing::{info, warn};

use super::{Submitted, class_limits, master_ad};
use crate::journal::Record;
use crate::router::{LinkId, Output, Router};

/// A proc checked and ready to be accepted.
struct Ready {
    job: JobId,
    request: SubmitRequest,
    /// Its spec with `$(ClusterId)` expanded.
    spec: JobSpec,
    master_ad: Option<ClassAd>,
}

/// The procs of `req`, each a request of its own with no other procs.
fn split(mut req: SubmitRequest) -> Vec<SubmitRequest> {
    let rest = std::mem::take(&mut req.procs);
    req.max_materialize = None;
    req.max_idle = None;
    let mut out = Vec::with_capacity(1 + rest.len());
    for spec in rest {
        out.push(SubmitRequest {
            spec,
            ..req.clone()
        });
    }
    out.insert(0, req);
    out
}

/// Whether the submit file said `hold = true` (the job attribute
/// `HoldAtSubmit`): the job is queued held, as HTCondor queues it.
fn holds_at_submit(spec: &JobSpec) -> bool {
    spec.attributes.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("HoldAtSubmit") && v.trim().eq_ignore_ascii_case("true")
    })
}

fn fail(code: FailureCode, message: String) -> Failure {
    Failure { code, message }
}

impl Router {
    /// `carmi submit`: a cluster of one proc or more.
    pub(in crate::router) fn submit(&mut self, link: LinkId, req: SubmitRequest) {
        match self.accept_cluster(req) {
            Ok(cluster) => self.send(link, FromGlobal::Submitted { job: cluster }),
            Err(f) => self.admin_fail(link, f.code, f.message),
        }
    }

    fn accept_cluster(&mut self, req: SubmitRequest) -> Result<JobId, Failure> {
        let owner = req.owner.chars().take(64).collect::<String>();
        let procs = 1 + req.procs.len();
        if let Err(e) = limits::check_count(
            "procs of a cluster",
            procs,
            limits::MAX_JOBS_PER_SUBMIT as usize,
            "procs",
        ) {
            return Err(fail(FailureCode::Invalid, e.to_string()));
        }
        self.check_machine(&req)?;
        let cluster = JobId(self.jobs.next_job);
        let now = Self::materialized_at_submit(procs, req.max_materialize, req.max_idle);
        let bounds = (req.max_materialize, req.max_idle);
        let mut ready = Vec::with_capacity(procs);
        // Every proc is checked now, so that a refusal is whole; the ones
        // past the bounds wait in the cluster, checked again when they
        // materialize (the limits may have changed by then).
        for (p, r) in split(req).into_iter().enumerate() {
            let job = JobId(cluster.0 + p as u64);
            match self.check_proc(job, cluster, r) {
                Ok(x) => ready.push(x),
                Err(mut f) => {
                    if procs > 1 {
                        f.message = format!("proc {p}: {}", f.message);
                    }
                    warn!(owner, "submit refused: {}", f.message);
                    return Err(f);
                }
            }
        }
        let waiting = ready.split_off(now);
        let impossible = self.admit(&ready)?;
        self.jobs.next_job += procs as u64;
        info!(cluster = %cluster, procs, owner, "cluster submitted");
        let live = ready.iter().map(|x| x.job).collect();
        for (x, why) in ready.into_iter().zip(impossible) {
            self.keep_proc(x, cluster, why);
        }
        self.keep_pending(cluster, now as u32, waiting, bounds, live);
        Ok(cluster)
    }

    /// Keeps and journals the procs that wait for the cluster's bounds.
    fn keep_pending(
        &mut self,
        cluster: JobId,
        first: u32,
        waiting: Vec<Ready>,
        (max_materialize, max_idle): (Option<u32>, Option<u32>),
        live: std::collections::BTreeSet<JobId>,
    ) {
        let mut specs = waiting.into_iter().map(|x| x.request);
        let Some(mut template) = specs.next() else {
            return;
        };
        template.procs = specs.map(|r| r.spec).collect();
        template.max_materialize = max_materialize;
        template.max_idle = max_idle;
        let mut pending = super::Pending::from_record(first, template);
        pending.live = live;
        if let Some(r) = pending.record(cluster) {
            self.out.push(Output::Journal(r));
        }
        self.jobs.pending.insert(cluster, pending);
    }

    /// A master pinned to a machine needs that machine in the pool.
    fn check_machine(&self, req: &SubmitRequest) -> Result<(), Failure> {
        if !req.anywhere && !self.alloc.is_online(&req.machine) {
            let message = format!(
                "machine `{}` is not in the pool (its local RM runs the master); name a machine of `carmi status` with --machine",
                req.machine
            );
            return Err(fail(FailureCode::Unavailable, message));
        }
        Ok(())
    }

    /// One proc against the limits and the files uploaded for it, with its
    /// macros expanded; nothing is changed.
    fn check_proc(
        &mut self,
        job: JobId,
        cluster: JobId,
        req: SubmitRequest,
    ) -> Result<Ready, Failure> {
        // First: nothing below may be sized by a number the client chose
        // before it is known to be within its limit.
        limits::check_submit(&req)?;
        if !self.stored.has(&req.executable.sha256) {
            let message = format!(
                "executable {} ({}) was not uploaded before the submit",
                req.executable.name, req.executable.sha256
            );
            return Err(fail(FailureCode::BadExecutable, message));
        }
        if let Some(r) = req
            .spec
            .input_refs
            .iter()
            .find(|r| !self.stored.has(&r.sha256))
        {
            let message = format!(
                "transfer_input_files: {} ({}) was not uploaded before the submit",
                r.name, r.sha256
            );
            return Err(fail(FailureCode::BadExecutable, message));
        }
        // `$(ClusterId)` grows with the ids: what `exec` will be given is
        // known only now, and is refused here rather than at the master's start.
        let spec = req.spec.expand(cluster.0);
        if let Err(e) = limits::check_command_line("arguments", &spec.arguments, &spec.environment)
        {
            let message = format!("{e}, once $(ClusterId) is expanded to {}", cluster.0);
            return Err(fail(FailureCode::Invalid, message));
        }
        let master_ad = master_ad(&req.spec).map_err(|m| fail(FailureCode::Invalid, m))?;
        Ok(Ready {
            job,
            request: req,
            spec,
            master_ad,
        })
    }

    /// Puts every proc in the allocator, or none: returns, per proc, why
    /// no set of machines could meet its minimums (for `on_impossible`).
    fn admit(&mut self, ready: &[Ready]) -> Result<Vec<Option<String>>, Failure> {
        let mut impossible = Vec::with_capacity(ready.len());
        for (i, x) in ready.iter().enumerate() {
            let verdict = self.admit_one(x);
            match verdict {
                Ok(why) => impossible.push(why),
                Err(mut f) => {
                    for y in &ready[..i] {
                        self.alloc.on_job_ended(y.job);
                    }
                    if ready.len() > 1 {
                        f.message = format!("proc {i}: {}", f.message);
                    }
                    info!(owner = x.request.owner, "submit refused: {}", f.message);
                    return Err(f);
                }
            }
        }
        Ok(impossible)
    }

    fn admit_one(&mut self, x: &Ready) -> Result<Option<String>, Failure> {
        let spec = &x.request.spec;
        self.alloc
            .submit_job(x.job, &x.request.owner, &class_limits(spec))?;
        self.alloc.set_job_attributes(x.job, &x.spec.attributes);
        // Judged with the job's own attributes, which machines' `Requirements` read.
        let impossible = match spec.on_impossible {
            OnImpossible::Wait => None,
            OnImpossible::Hold | OnImpossible::Reject => self.alloc.impossible(x.job),
        };
        if let Some(why) = &impossible
            && spec.on_impossible == OnImpossible::Reject
        {
            // Never accepted: nothing journaled, and the id is given again.
            self.alloc.on_job_ended(x.job);
            let message = format!("{why} (on_impossible = reject)");
            return Err(fail(FailureCode::Unavailable, message));
        }
        Ok(impossible)
    }

    /// One waiting proc into the queue, as at submit (`materialize.rs`).
    pub(in crate::router) fn materialize_one(
        &mut self,
        job: JobId,
        cluster: JobId,
        req: SubmitRequest,
    ) -> Result<(), String> {
        let ready = self.check_proc(job, cluster, req).map_err(|f| f.message)?;
        let why = self.admit_one(&ready).map_err(|f| f.message)?;
        self.keep_proc(ready, cluster, why);
        Ok(())
    }

    /// Journals and keeps an admitted proc.
    fn keep_proc(&mut self, x: Ready, cluster: JobId, impossible: Option<String>) {
        let job = x.job;
        self.stored.touch(&x.request.executable.sha256, self.now);
        for r in &x.request.spec.input_refs {
            self.stored.touch(&r.sha256, self.now);
        }
        // On disk before the answer: the driver fsyncs it before sending on.
        self.out.push(Output::Journal(Record::Submitted {
            job,
            request: Box::new(x.request.clone()),
            cluster: (cluster != job).then_some(cluster),
        }));
        let hold = holds_at_submit(&x.spec);
        let sub = Submitted::new(x.request, x.spec, x.master_ad, cluster);
        let owner = sub.owner.clone();
        self.keep_submitted(job, sub);
        self.log_event(job, EventKind::Submitted { owner });
        if let Some(why) = impossible {
            self.hold_at_submit(job, &why);
        } else if hold && self.alloc.hold_job(job).is_ok() {
            self.held_by_pool(
                job,
                "held at submit (hold = true): `carmi release` lets it start",
            );
        }
    }

    /// The cluster and proc of `job`, for `q` and `history` (`None` for a
    /// job started by hand).
    pub(in crate::router) fn cluster_and_proc(&self, job: JobId) -> (Option<JobId>, u32) {
        match self.jobs.submitted.get(&job) {
            Some(s) => (Some(s.cluster), job.0.saturating_sub(s.cluster.0) as u32),
            None => (None, 0),
        }
    }

    /// The procs of `cluster` in the queue, in proc order.
    pub(in crate::router) fn procs_of(&self, cluster: JobId) -> Vec<JobId> {
        let mut jobs: Vec<JobId> = self
            .jobs
            .submitted
            .iter()
            .filter(|(_, s)| s.cluster == cluster)
            .map(|(j, _)| *j)
            .collect();
        jobs.sort();
        jobs
    }

    /// The jobs `carmi rm|hold|release C` acts on: every proc of cluster
    /// `C` in the queue, or `C` alone when it is a job started by hand; an
    /// error saying what `C` is otherwise.
    pub(in crate::router) fn cluster_jobs(&self, cluster: JobId) -> Result<Vec<JobId>, String> {
        let procs = self.procs_of(cluster);
        if !procs.is_empty() {
            return Ok(procs);
        }
        if let Some(s) = self.jobs.submitted.get(&cluster) {
            let proc = cluster.0 - s.cluster.0;
            return Err(format!(
                "{} is not a cluster: job {} is proc {}.{proc}; name it `{}.{proc}`",
                cluster.0, cluster.0, s.cluster.0, s.cluster.0
            ));
        }
        if self.alloc.has_job(cluster) {
            return Ok(vec![cluster]);
        }
        Err(format!(
            "cluster {} has no job in the queue (its jobs ended, or it never existed)",
            cluster.0
        ))
    }

    /// `carmi rm C`: every proc of the cluster removed.
    pub(in crate::router) fn remove_cluster(&mut self, link: LinkId, cluster: JobId) {
        // Its waiting procs first, so that no removal makes one materialize.
        let dropped = self.drop_pending(cluster);
        let jobs = match self.cluster_jobs(cluster) {
            Ok(jobs) => jobs,
            Err(_) if dropped => Vec::new(),
            Err(message) => return self.admin_fail(link, FailureCode::Invalid, message),
        };
        info!(cluster = %cluster, procs = jobs.len(), "cluster removed by an administrator");
        for job in jobs {
            self.record_end(job, JobEnd::Removed);
            self.end_job(job);
        }
        self.send(link, FromGlobal::Removed { job: cluster });
    }
}
