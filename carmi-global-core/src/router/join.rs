//! Which machine's applications may join a job (issue 38, "a machine stays
//! in its jobs"): an `AppAttach` naming an existing job is taken only from
//! a machine that takes part in it — one running (or starting) one of its
//! processes or its master, one an application of the job attached through,
//! one its hand-started first process is expected back on, or one holding
//! one of its hosts. Any other machine is refused with the reason, so that
//! a machine's owner, holding only the machine's own daemon token, can
//! neither join another user's job, nor receive its credential, nor message
//! its processes. A job id this global RM does not know (ended, or never
//! given) is not adopted: its journal holds every job it gave, so such an
//! application is told that its job is gone.

use carmi_proto::ids::JobId;

use super::Router;

impl Router {
    /// True when machine `name` takes part in `job` (see the module).
    pub(super) fn machine_in_job(&self, name: &str, job: JobId) -> bool {
        let on_machine = |h| self.alloc.host_machine(h) == Some(name);
        self.jobs
            .masters
            .values()
            .any(|(j, m)| *j == job && m == name)
            || self
                .jobs
                .awaiting_roots
                .values()
                .any(|(j, m)| *j == job && m == name)
            || self.procs.of_job(job).into_iter().any(|p| {
                self.procs.find(p).is_some_and(|pr| {
                    pr.host.is_some_and(on_machine)
                        || pr.attached.as_ref().is_some_and(|a| a.machine == name)
                })
            })
            || self.alloc.job_hosts(job).into_iter().any(on_machine)
    }

    /// Why an application of machine `name` may not join `job`.
    pub(super) fn join_refusal(&self, name: &str, job: JobId) -> String {
        format!(
            "machine `{name}` runs no process of job {} and holds none of its hosts: an application there may not join it",
            job.0
        )
    }
}
