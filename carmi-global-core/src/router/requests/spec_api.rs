//! The specification's answers where they differ from a plain lookup
//! (issue 15, item 5): `process_info` lists every process of the
//! application with its parent and executable, and `DefineClass` of a name
//! the job already has answers false (here a [`FailureCode::ClassExists`]
//! failure) unless the request asks to replace it.

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{Failure, FailureCode, ProcessInfo, Reply};

use crate::procs::Proc;
use crate::router::Router;

impl Router {
    /// What `ProcessInfo` and `Processes` say of one process: the parent is
    /// the process whose `ClassSpawn` started it; a first process runs the
    /// executable of its job's submit file (unknown for one started by hand).
    pub(in crate::router) fn process_info(&self, process: ProcessId, p: &Proc) -> ProcessInfo {
        let executable = p.executable.clone().or_else(|| {
            p.root
                .then(|| self.jobs.submitted.get(&p.job))
                .flatten()
                .map(|s| s.executable.name.clone())
        });
        ProcessInfo {
            process,
            host: p.host,
            state: p.state.clone(),
            parent: p.origin.map(|o| o.process),
            executable,
        }
    }

    /// `Processes`: every process of `job` the table still holds, by id.
    pub(in crate::router) fn processes_of(&self, job: JobId) -> Reply {
        let list = self
            .procs
            .of_job(job)
            .into_iter()
            .filter_map(|id| Some(self.process_info(id, self.procs.find(id)?)))
            .collect();
        Reply::Processes(list)
    }

    /// `DefineClass` without `replace` of a class `job` already has (from
    /// its submit file or an earlier `DefineClass`) fails, naming the way
    /// to redefine it; checked before the allocator and the journal see it,
    /// so a refused definition changes nothing and is never replayed.
    pub(in crate::router) fn check_define(
        &self,
        job: JobId,
        name: &str,
        replace: bool,
    ) -> Result<(), Failure> {
        if replace || !self.alloc.has_class(job, name) {
            return Ok(());
        }
        Err(Failure {
            code: FailureCode::ClassExists,
            message: format!(
                "job {job} already has class `{name}`; DefineClass with replace = true redefines it"
            ),
        })
    }
}
