//! Job credentials: what a job's processes hold instead of the pool secret.
//!
//! Every job has a 256-bit key of its own. Its processes prove it (with the
//! same HMAC challenge-response as the pool secret, [`crate::handshake`]) to
//! their local RM, which admits it for that job only, and to each other on
//! direct connections, which a process of another job cannot open: it holds
//! another key. The pool secret and the tokens never reach a sandbox.
//!
//! The global RM derives each job's key from its own random job key
//! ([`JobKey`], made once with the operating system's RNG and kept 0600 in its
//! state directory) with HMAC-SHA256 over the job id: no table of secrets to
//! journal, the same key after a restart, and a different one for every job
//! id of every pool (a lost state directory makes a new job key with it).
//!
//! A credential travels as the text of its file (`carmi-job-credential j7
//! <64 hex digits>`), which [`crate::handshake::Secret::new`] reads like a
//! pool secret file: a process finds it through `CARMI_SECRET_FILE` as before.

use std::path::Path;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::files::FileError;
use crate::ids::JobId;
use crate::proof::{hex, unhex};

/// First word of a credential file.
pub const PREFIX: &str = "carmi-job-credential";

/// Name of the credential file in a process's sandbox.
pub const FILE_NAME: &str = ".carmi-credential";

/// One job's credential.
#[derive(Clone, PartialEq, Eq)]
pub struct JobCredential {
    job: JobId,
    /// 64 lowercase hex digits: the HMAC key of the handshake.
    key: String,
}

impl std::fmt::Debug for JobCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobCredential({}, ..)", self.job)
    }
}

impl JobCredential {
    /// A random credential for `job` (a local RM that was given none).
    pub fn random(job: JobId) -> JobCredential {
        let mut b = [0u8; 32];
        rand::rng().fill_bytes(&mut b);
        JobCredential { job, key: hex(&b) }
    }

    /// The job it opens.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The text of its file (and of the messages that carry it).
    pub fn text(&self) -> String {
        format!("{PREFIX} {} {}\n", self.job, self.key)
    }

    /// Reads a credential's text; `None` if it is not one.
    pub fn parse(text: &str) -> Option<JobCredential> {
        let mut words = text.split_ascii_whitespace();
        if words.next()? != PREFIX {
            return None;
        }
        let job: JobId = words.next()?.parse().ok()?;
        let key = words.next()?;
        let valid = key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid || words.next().is_some() {
            return None;
        }
        Some(JobCredential {
            job,
            key: key.to_ascii_lowercase(),
        })
    }

    /// The handshake key (`crate::handshake::Secret` is made from it).
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

/// The global RM's key from which every job's credential is derived.
#[derive(Clone)]
pub struct JobKey([u8; 32]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobKey(..)")
    }
}

impl JobKey {
    /// A fresh random key (kept in memory only).
    pub fn generate() -> JobKey {
        let mut b = [0u8; 32];
        rand::rng().fill_bytes(&mut b);
        JobKey(b)
    }

    /// Reads the key at `path`, or makes one there (mode 0600) if there is
    /// none. A file others may read, or that holds no key, is an error.
    pub fn load_or_create(path: &Path) -> Result<JobKey, String> {
        if !path.exists() {
            let key = JobKey::generate();
            crate::files::write_private(path, &hex(&key.0), false)
                .map_err(|e| format!("cannot write the job key: {e}"))?;
            return Ok(key);
        }
        let text = crate::files::read_private(path).map_err(|e| e.to_string())?;
        let bytes = unhex(text.trim())
            .filter(|b| b.len() == 32)
            .ok_or_else(|| {
                format!(
                    "{} does not hold a job key (64 hex digits); remove it to make a new one",
                    path.display()
                )
            })?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(JobKey(key))
    }

    /// The credential of `job`.
    pub fn credential(&self, job: JobId) -> JobCredential {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(PREFIX.as_bytes());
        m.update(&job.0.to_be_bytes());
        JobCredential {
            job,
            key: hex(&m.finalize().into_bytes()),
        }
    }
}

/// Writes `credential` as a new file `path`, mode 0600 from the moment it exists.
pub fn write_file(path: &Path, credential: &JobCredential) -> Result<(), FileError> {
    crate::files::write_private(path, &credential.text(), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::Secret;

    #[test]
    fn a_credential_reads_back_from_its_text_and_as_a_secret() {
        let c = JobKey::generate().credential(JobId(7));
        assert_eq!(JobCredential::parse(&c.text()), Some(c.clone()));
        let secret = Secret::new(c.text().as_bytes()).unwrap();
        assert_eq!(secret.job(), Some(JobId(7)));
        assert!(!c.text().contains("JobCredential"));
        assert!(!format!("{c:?}").contains(&c.key), "Debug hides the key");
    }

    #[test]
    fn each_job_and_each_pool_has_its_own_credential() {
        let (a, b) = (JobKey::generate(), JobKey::generate());
        assert_eq!(a.credential(JobId(1)), a.credential(JobId(1)));
        assert_ne!(a.credential(JobId(1)), a.credential(JobId(2)));
        assert_ne!(a.credential(JobId(1)), b.credential(JobId(1)));
    }

    #[test]
    fn malformed_texts_are_not_credentials() {
        let key = "ab".repeat(32);
        assert!(JobCredential::parse(&format!("{PREFIX} j3 {key}")).is_some());
        for bad in [
            format!("{PREFIX} p3 {key}"),
            format!("{PREFIX} j3 {}", &key[..62]),
            format!("{PREFIX} j3 {key} more"),
            format!("other j3 {key}"),
            format!("{PREFIX} j3 {}", "zz".repeat(32)),
        ] {
            assert_eq!(JobCredential::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn the_job_key_is_kept_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.key");
        let made = JobKey::load_or_create(&path).unwrap();
        let again = JobKey::load_or_create(&path).unwrap();
        assert_eq!(made.credential(JobId(1)), again.credential(JobId(1)));
        crate::files::check_private(&path).unwrap();
        std::fs::write(&path, "nonsense").unwrap();
        let err = JobKey::load_or_create(&path).unwrap_err();
        assert!(err.contains("does not hold a job key"), "{err}");
    }
}
