//! Applications whose job ended are told so, never left waiting (issue 15,
//! "nothing stuck"): a process attached when its job ends, and one whose
//! local RM announces it again after the job ended while the machine was
//! away (declared lost and back at once, say), get [`FromGlobal::JobGone`]
//! with why the job ended; their local RM fails what they still wait for
//! and closes their connection. Before, a re-announced process was quietly
//! given a new job and waited forever for answers to the old one's requests.
//!
//! The other way round, no ghost jobs: an application attached through a
//! local RM that went away (killed, restarted) and came back without it
//! (it ended meanwhile) is not announced again before the machine's first
//! heartbeat; it is taken as gone then, and a job it started ends, instead
//! of staying "attached" for ever.

use carmi_proto::ids::{ConnId, JobId, ProcessId};
use carmi_proto::msg::{ExitStatus, FromGlobal, JobEnd};
use tracing::info;

use super::{LinkId, Router};
use crate::procs::Attachment;

impl Router {
    /// Why `job` ended, for the application: from its history record when
    /// there is one.
    pub(super) fn end_reason(&self, job: JobId) -> String {
        let why = match self.reports.history.select(Some(job)).pop().map(|r| r.end) {
            Some(JobEnd::Completed(ExitStatus::HostLost)) => {
                "the machine its master ran on was declared lost (silent past the heartbeat bound)"
                    .to_string()
            }
            Some(JobEnd::Completed(ExitStatus::Code(c))) => {
                format!("its master exited with code {c}")
            }
            Some(JobEnd::Completed(ExitStatus::Signal(s))) => {
                format!("its master was killed by signal {s}")
            }
            Some(JobEnd::Completed(ExitStatus::FailedToStart(r)) | JobEnd::FailedToStart(r)) => {
                format!("its master could not be started: {r}")
            }
            Some(JobEnd::Removed) => "it was removed (carmi rm)".to_string(),
            Some(JobEnd::RemovedByPolicy(why)) => format!("it was {why}"),
            Some(JobEnd::Detached) => "its first process left".to_string(),
            None => "it is not in the pool any more".to_string(),
        };
        format!("job {job} ended: {why}")
    }

    /// Tells the application on `conn` at `link` that `job` ended.
    pub(super) fn tell_gone(&mut self, link: LinkId, conn: ConnId, job: JobId) {
        let reason = self.end_reason(job);
        info!(%conn, %job, "{reason}; telling the application");
        self.send(link, FromGlobal::JobGone { conn, job, reason });
    }

    /// Tells an application attached at `at` that `job` ended, if its
    /// machine is connected (a machine away announces it again on its
    /// return, and hears it then).
    pub(super) fn tell_gone_at(&mut self, at: &Attachment, job: JobId) {
        if let Some(link) = self.registry.ready_link(&at.machine) {
            self.tell_gone(link, at.conn, job);
        }
    }

    /// At `name`'s `Advertise`: the applications attached through it so
    /// far, which its local RM announces again (`AppAttach`) right after
    /// `Registered` if it still serves them.
    pub(super) fn expect_announcements(&mut self, name: &str) {
        let attached = self.procs.attached_through(name);
        if let Some(p) = self.registry.presence.get_mut(name) {
            p.unannounced = attached;
        }
    }

    /// An application announced itself through `name` at `conn`, as
    /// `process` if it names one: not a ghost.
    pub(super) fn announced(&mut self, name: &str, conn: ConnId, process: Option<ProcessId>) {
        if let Some(p) = self.registry.presence.get_mut(name) {
            p.unannounced
                .retain(|&(c, pr)| c != conn && Some(pr) != process);
        }
    }

    /// At `name`'s first heartbeat after its `Advertise`: the applications
    /// it did not announce again left while it was away; each is detached
    /// as if its connection had closed (ending the job it started).
    pub(super) fn settle_unannounced(&mut self, name: &str) {
        let Some(gone) = self
            .registry
            .presence
            .get_mut(name)
            .map(|p| std::mem::take(&mut p.unannounced))
        else {
            return;
        };
        for (conn, process) in gone {
            if self.procs.attached_at(name, conn) != Some(process) {
                continue;
            }
            let job = self.procs.find(process).map(|p| p.job);
            info!(machine = name, %conn, %process, job = ?job, "an application attached through this machine was not announced again after its local RM came back: it left while the local RM was away");
            self.app_detach(name, conn);
        }
    }
}
