//! How the job commands name jobs, as HTCondor users write them: `C` is a
//! cluster (every proc of one submit), `C.P` one proc of it, and `rm`,
//! `hold`, `release` and `q` also take a user name (every job of that user)
//! as `condor_rm alice` does. The older `jC` spelling still means `C`.
//!
//! A cluster's procs have the job ids `C`, `C+1`, ... (the global RM gives
//! them together), so `C.0` is job `C`; a proc above 0 is looked up in the
//! queue, then in the history, so that a mistyped `C.P` names nothing
//! rather than another cluster's job.

use std::fmt;
use std::str::FromStr;

use carmi_api::admin::request;
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, JobRecord, JobStatus, ToGlobal};

use crate::talk::failed;

/// A job, a cluster or a user's jobs, as a command line names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `C` (or `jC`): a cluster, every proc of it.
    Cluster(u64),
    /// `C.P`: one proc of a cluster.
    Proc(u64, u32),
    /// A user name: every job of that user in the queue.
    User(String),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        let digits = s.strip_prefix('j').unwrap_or(s);
        if let Some((c, p)) = digits.split_once('.')
            && !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_digit())
        {
            return match (c.parse::<u64>(), p.parse::<u32>()) {
                (Ok(c), Ok(p)) => Ok(Target::Proc(c, p)),
                _ => Err(format!(
                    "`{s}` is not a job: write a cluster `C` or a proc `C.P` (e.g. 12 or 12.3)"
                )),
            };
        }
        if let Ok(c) = digits.parse::<u64>() {
            return Ok(Target::Cluster(c));
        }
        let user = s.chars().all(|c| c.is_alphanumeric() || "_-.@".contains(c));
        if user && s.chars().next().is_some_and(char::is_alphabetic) {
            return Ok(Target::User(s.to_string()));
        }
        Err(format!(
            "`{s}` is not a job: write a cluster `C`, a proc `C.P` or a user name"
        ))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cluster(c) => write!(f, "{c}"),
            Target::Proc(c, p) => write!(f, "{c}.{p}"),
            Target::User(u) => write!(f, "{u}"),
        }
    }
}

/// `C.P` of a queued job (`C.0` for a job of an older global RM).
pub fn proc_id(j: &JobStatus) -> String {
    format!("{}.{}", j.cluster.unwrap_or(j.job).0, j.proc)
}

/// `C.P` of an ended job.
pub fn record_id(j: &JobRecord) -> String {
    format!("{}.{}", j.cluster.unwrap_or(j.job).0, j.proc)
}

/// Whether queued job `j` is one `t` names.
pub fn names(t: &Target, j: &JobStatus) -> bool {
    t.names_job(j.cluster.unwrap_or(j.job).0, j.proc, &j.owner)
}

/// Whether ended job `j` is one `t` names.
pub fn names_record(t: &Target, j: &JobRecord) -> bool {
    t.names_job(j.cluster.unwrap_or(j.job).0, j.proc, &j.owner)
}

impl Target {
    /// Whether proc `proc` of cluster `cluster`, owned by `owner`, is named.
    fn names_job(&self, cluster: u64, proc: u32, owner: &str) -> bool {
        match self {
            Target::Cluster(c) => cluster == *c,
            Target::Proc(c, p) => cluster == *c && proc == *p,
            Target::User(u) => owner == u,
        }
    }
}

/// The queue, as `carmi q` gets it.
pub async fn queue(pool: &str, secret: &Secret) -> anyhow::Result<Vec<JobStatus>> {
    match request(pool, secret, None, ToGlobal::Queue).await? {
        FromGlobal::Queue(jobs) => Ok(jobs),
        other => Err(failed(other, "q")),
    }
}

/// The job id of the one job `t` names, for commands that act on one job
/// (`logs`, `events`, `fetch`, `wait` of a proc, `q -analyze`): `C` and
/// `C.0` are job `C`; `C.P` is looked up in the queue, then the history.
pub async fn one_job(pool: &str, secret: &Secret, t: &Target) -> anyhow::Result<JobId> {
    let (c, p) = match t {
        Target::Cluster(c) | Target::Proc(c, 0) => return Ok(JobId(*c)),
        Target::Proc(c, p) => (*c, *p),
        Target::User(u) => anyhow::bail!("`{u}` names a user; this command takes one job, `C.P`"),
    };
    if let Some(j) = queue(pool, secret).await?.iter().find(|j| names(t, j)) {
        return Ok(j.job);
    }
    // Procs have the ids C+P: the history is asked for that one.
    let guess = JobId(c.saturating_add(u64::from(p)));
    let msg = ToGlobal::History { job: Some(guess) };
    if let FromGlobal::History(records) = request(pool, secret, None, msg).await?
        && records.iter().any(|r| names_record(t, r))
    {
        return Ok(guess);
    }
    anyhow::bail!("job {c}.{p} is neither in the queue nor in the history")
}

/// A `-constraint` expression, or why it is not one.
pub fn constraint(text: &str) -> anyhow::Result<classad::Expr> {
    classad::parse_expr(text).map_err(|e| {
        anyhow::anyhow!(
            "-constraint: not a ClassAd expression (column {}: {})",
            e.column,
            e.message
        )
    })
}

/// A queued job as a ClassAd with HTCondor's attribute names, for
/// `-constraint` (as `condor_q -constraint` reads its job ads).
pub fn job_ad(j: &JobStatus) -> classad::ClassAd {
    use classad::Value;
    let mut ad = classad::ClassAd::new();
    let int = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
    // Published attributes first, so that HTCondor's own names win.
    for (name, value) in &j.attrs {
        let _ = ad.insert_expr_str(name, value);
    }
    ad.insert_value("ClusterId", int(j.cluster.unwrap_or(j.job).0));
    ad.insert_value("ProcId", int(u64::from(j.proc)));
    ad.insert_value("Owner", Value::str(j.owner.as_str()));
    ad.insert_value("Cmd", Value::str(j.executable.as_str()));
    ad.insert_value("QDate", int(j.submitted_unix));
    let status = match j.state.as_str() {
        "waiting" => 1,
        "held" => 5,
        _ => 2,
    };
    ad.insert_value("JobStatus", Value::Int(status));
    if status == 5 {
        let reason = j.note.as_deref().unwrap_or_default();
        ad.insert_value("HoldReason", Value::str(reason));
    }
    ad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_procs_and_users_are_read_as_htcondor_users_write_them() {
        assert_eq!("12".parse(), Ok(Target::Cluster(12)));
        assert_eq!("j12".parse(), Ok(Target::Cluster(12)));
        assert_eq!("12.3".parse(), Ok(Target::Proc(12, 3)));
        assert_eq!("alice".parse(), Ok(Target::User("alice".into())));
        assert_eq!("a.b@x".parse(), Ok(Target::User("a.b@x".into())));
        assert!("12.x".parse::<Target>().is_err());
        assert!("-3".parse::<Target>().is_err());
        assert!("".parse::<Target>().is_err());
    }
}
