//! Job credentials at the global RM: each job's is derived from the job key
//! in the state directory (`carmi_api::jobcred`) and sent to a local RM
//! just before what makes it host one of the job's processes (when, the
//! core decides: `carmi_global_core::node::needs_credential`).

use carmi_api::ids::JobId;
use carmi_api::jobcred::JobKey;
use carmi_api::msg::FromGlobal;

/// The job key's file in the state directory (mode 0600, made on first start).
pub const FILE: &str = "jobs.key";

/// Job `job`'s credential, signed with `key`, as the message that carries it.
/// Sent every time the core asks, not once per connection: a local RM
/// forgets a job's credential when the job's last process there ends.
pub fn message(key: &JobKey, job: JobId) -> FromGlobal {
    FromGlobal::JobCredential {
        job,
        credential: key.credential(job).text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_carries_the_jobs_own_credential() {
        let key = JobKey::generate();
        let FromGlobal::JobCredential { job, credential } = message(&key, JobId(4)) else {
            panic!("not a credential");
        };
        assert_eq!(job, JobId(4));
        assert_eq!(credential, key.credential(JobId(4)).text());
        assert_ne!(credential, key.credential(JobId(5)).text());
    }
}
