//! The job credentials this local RM knows (`carmi_api::jobcred`): given by
//! the global RM before each process of a job it places here, written into
//! the sandboxes of the job's processes, admitted on the application
//! listener for that job only, and forgotten when the job has neither a
//! process nor an application connection left here, so that a credential is
//! refused once its job is gone from the machine.
//!
//! Shared between the driver (which learns, hands out and releases) and the
//! application listener's connection tasks (which look credentials up in the
//! handshake), behind one short-held lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use carmi_api::handshake::Secret;
use carmi_api::ids::{ConnId, JobId, ProcessId};
use carmi_api::jobcred::JobCredential;
use carmi_api::msg::Role;

/// What keeps a job's credential alive here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// A process started here.
    Process(ProcessId),
    /// An application connection attached to the job.
    App(ConnId),
}

#[derive(Default)]
struct Inner {
    creds: HashMap<JobId, JobCredential>,
    holders: HashMap<JobId, HashSet<Holder>>,
    job_of: HashMap<Holder, JobId>,
}

/// The credentials of the jobs present on this machine.
#[derive(Clone, Default)]
pub struct JobCreds(Arc<Mutex<Inner>>);

impl JobCreds {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No code panics while holding it: a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the credential the global RM sent for its job.
    pub fn learn(&self, credential: JobCredential) {
        self.lock().creds.insert(credential.job(), credential);
    }

    /// The credential of `job`, if known.
    pub fn get(&self, job: JobId) -> Option<JobCredential> {
        self.lock().creds.get(&job).cloned()
    }

    /// The credential for a process of `job` about to start, held by it
    /// until [`JobCreds::release`]. A job the global RM sent no credential
    /// for (a test double, an older global RM) gets a random one, good on
    /// this machine only, rather than the pool secret.
    pub fn hold(&self, job: JobId, holder: Holder) -> JobCredential {
        let mut inner = self.lock();
        let cred = inner
            .creds
            .entry(job)
            .or_insert_with(|| {
                tracing::warn!(
                    %job,
                    "the global RM sent no credential for this job; its processes here get one of this machine only"
                );
                JobCredential::random(job)
            })
            .clone();
        inner.holders.entry(job).or_default().insert(holder);
        inner.job_of.insert(holder, job);
        cred
    }

    /// `holder` is gone; the last one of a job takes its credential with it.
    pub fn release(&self, holder: Holder) {
        let mut inner = self.lock();
        let Some(job) = inner.job_of.remove(&holder) else {
            return;
        };
        let empty = inner.holders.get_mut(&job).is_none_or(|h| {
            h.remove(&holder);
            h.is_empty()
        });
        if empty {
            inner.holders.remove(&job);
            inner.creds.remove(&job);
            tracing::debug!(%job, "the job left this machine: its credential is forgotten");
        }
    }

    /// The key a connecting client says it proves: the pool secret, or the
    /// credential of a job present here.
    pub fn choose(&self, pool: &Secret, job: Option<JobId>) -> Result<Secret, String> {
        match job {
            None => Ok(pool.clone()),
            Some(job) => self.get(job).map(|c| Secret::from(&c)).ok_or_else(|| {
                format!(
                    "job {job} has no process on this machine: its credential is not (or no longer) valid here"
                )
            }),
        }
    }
}

/// What a client proving `key` may be on the application listener: with a
/// job's credential, only an application of that job.
pub fn admit(role: &Role, key: Option<JobId>) -> Result<(), String> {
    match (role, key) {
        (Role::Application { job: Some(j), .. }, Some(k)) if *j == k => Ok(()),
        (_, Some(k)) => Err(format!(
            "the credential of job {k} opens connections of processes of job {k} only, not {role:?}"
        )),
        (Role::Application { .. } | Role::Admin, None) => Ok(()),
        (other, None) => Err(format!(
            "a local RM serves application processes and control tools only, not {other:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(job: Option<u64>) -> Role {
        Role::Application {
            job: job.map(JobId),
            process: None,
            endpoint: "127.0.0.1:1".into(),
        }
    }

    #[test]
    fn a_credential_lives_while_the_job_has_a_holder_here() {
        let creds = JobCreds::default();
        let job = JobId(3);
        let given = JobCredential::random(job);
        creds.learn(given.clone());
        assert_eq!(creds.hold(job, Holder::Process(ProcessId(1))), given);
        creds.hold(job, Holder::App(ConnId(7)));
        creds.release(Holder::Process(ProcessId(1)));
        assert!(creds.get(job).is_some(), "the application still holds it");
        creds.release(Holder::App(ConnId(7)));
        assert!(creds.get(job).is_none());
        let pool = Secret::new(b"0123456789abcdef0123").unwrap();
        let err = creds.choose(&pool, Some(job)).unwrap_err();
        assert!(err.contains("no longer"), "{err}");
        assert!(creds.choose(&pool, None).is_ok());
    }

    #[test]
    fn a_job_credential_admits_applications_of_its_job_only() {
        assert!(admit(&app(Some(3)), Some(JobId(3))).is_ok());
        assert!(admit(&app(Some(4)), Some(JobId(3))).is_err());
        assert!(admit(&app(None), Some(JobId(3))).is_err());
        assert!(admit(&Role::Admin, Some(JobId(3))).is_err());
        assert!(admit(&Role::Admin, None).is_ok());
        assert!(admit(&app(None), None).is_ok());
        let peer = Role::Peer {
            from: ProcessId(1),
            job: JobId(3),
        };
        assert!(admit(&peer, None).is_err());
    }
}
