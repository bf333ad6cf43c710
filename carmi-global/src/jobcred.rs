//! Job credentials at the global RM: each job's is derived from the job key
//! in the state directory (`carmi_api::jobcred`) and sent to a local RM
//! just before what makes it host one of the job's processes.

use carmi_api::jobcred::JobKey;
use carmi_api::msg::FromGlobal;

/// The job key's file in the state directory (mode 0600, made on first start).
pub const FILE: &str = "jobs.key";

/// The credential a local RM needs before `msg`: a `Spawn`, `SpawnMaster`
/// or `Attached` puts a process of that job on the machine (its sandbox, or
/// an application that connected with the pool secret and is given it).
/// Sent every time, not once per connection: a local RM forgets a job's
/// credential when the job's last process there ends.
pub fn to_precede(key: &JobKey, msg: &FromGlobal) -> Option<FromGlobal> {
    let job = match msg {
        FromGlobal::Spawn { job, .. }
        | FromGlobal::SpawnMaster { job, .. }
        | FromGlobal::Attached { job, .. } => *job,
        _ => return None,
    };
    Some(FromGlobal::JobCredential {
        job,
        credential: key.credential(job).text(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::{ConnId, JobId, ProcessId};

    #[test]
    fn an_attach_is_preceded_by_its_jobs_credential_and_a_deliver_by_nothing() {
        let key = JobKey::generate();
        let attached = FromGlobal::Attached {
            conn: ConnId(1),
            job: JobId(4),
            process: ProcessId(9),
        };
        let Some(FromGlobal::JobCredential { job, credential }) = to_precede(&key, &attached)
        else {
            panic!("no credential before Attached");
        };
        assert_eq!(job, JobId(4));
        assert_eq!(credential, key.credential(JobId(4)).text());
        let kill = FromGlobal::Kill {
            process: ProcessId(9),
        };
        assert!(to_precede(&key, &kill).is_none());
    }
}
