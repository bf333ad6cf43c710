//! Attributes a running job publishes about itself (`SetJobAttrs`), for
//! the people watching it: `carmi q --json` and the dashboard show them.
//! WoDi reports its cycles and steps this way.
//!
//! They live as long as the job and are not journaled: they describe what
//! a running program is doing, which it says again after a restart.

use std::collections::{BTreeMap, HashMap};

use carmi_proto::ids::JobId;
use carmi_proto::limits::{MAX_EXPRESSION_BYTES, MAX_JOB_ATTRIBUTES};
use carmi_proto::msg::{Failure, FailureCode};

/// The attribute a job started by hand sets to its exit code before its
/// first process leaves, so that `carmi history` shows it as completed.
pub(in crate::router) const EXIT_CODE: &str = "ExitCode";

/// Every running job's published attributes: name -> ClassAd value text.
#[derive(Debug, Default)]
pub(in crate::router) struct JobAttrs {
    by_job: HashMap<JobId, BTreeMap<String, String>>,
}

impl JobAttrs {
    /// Sets `attrs` on `job`, all or nothing: each name must be a ClassAd
    /// identifier and each value a ClassAd expression, and the job may hold
    /// at most [`MAX_JOB_ATTRIBUTES`] names.
    pub(in crate::router) fn set(
        &mut self,
        job: JobId,
        attrs: Vec<(String, String)>,
    ) -> Result<(), Failure> {
        for (name, value) in &attrs {
            check(name, value)?;
        }
        let have = self.by_job.entry(job).or_default();
        let new = attrs.iter().filter(|(n, _)| !have.contains_key(n));
        let names: std::collections::BTreeSet<&String> = new.map(|(n, _)| n).collect();
        if have.len() + names.len() > MAX_JOB_ATTRIBUTES {
            return Err(invalid(format!(
                "SetJobAttrs: job {job} would hold {} attributes, above the limit of \
                 {MAX_JOB_ATTRIBUTES}",
                have.len() + names.len()
            )));
        }
        have.extend(attrs);
        Ok(())
    }

    /// `job`'s attributes, sorted by name.
    pub(in crate::router) fn of(&self, job: JobId) -> Vec<(String, String)> {
        (self.by_job.get(&job))
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// The exit code `job` declared as its `ExitCode` attribute (HTCondor's
    /// name), if an integer: how a job started by hand, whose first process
    /// no local RM watches, tells the pool it is leaving because it is done.
    pub(in crate::router) fn exit_code(&self, job: JobId) -> Option<i32> {
        self.by_job.get(&job)?.get(EXIT_CODE)?.trim().parse().ok()
    }

    /// The job ended: its attributes go with it.
    pub(in crate::router) fn forget(&mut self, job: JobId) {
        self.by_job.remove(&job);
    }
}

/// A name must be an identifier and a value an expression, so that what
/// `carmi q` shows reads as ClassAd.
fn check(name: &str, value: &str) -> Result<(), Failure> {
    let ident = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return Err(invalid(format!(
            "SetJobAttrs: `{name}` is not an attribute name (letters, digits and `_`, not \
             starting with a digit)"
        )));
    }
    if value.len() > MAX_EXPRESSION_BYTES {
        return Err(invalid(format!(
            "SetJobAttrs: the value of `{name}` has {} bytes, above the limit of \
             {MAX_EXPRESSION_BYTES}",
            value.len()
        )));
    }
    classad::parse_expr(value).map(|_| ()).map_err(|e| {
        invalid(format!(
            "SetJobAttrs: the value of `{name}` is not a ClassAd expression (column {}: {})",
            e.column, e.message
        ))
    })
}

fn invalid(message: String) -> Failure {
    Failure {
        code: FailureCode::Invalid,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn attributes_replace_by_name_and_go_with_the_job() {
        let mut a = JobAttrs::default();
        let j = JobId(7);
        a.set(j, pairs(&[("WodiCycle", "1"), ("Phase", "\"warm\"")]))
            .unwrap();
        a.set(j, pairs(&[("WodiCycle", "2")])).unwrap();
        assert_eq!(a.of(j), pairs(&[("Phase", "\"warm\""), ("WodiCycle", "2")]));
        assert!(a.of(JobId(8)).is_empty());
        a.forget(j);
        assert!(a.of(j).is_empty());
    }

    #[test]
    fn bad_names_values_and_too_many_are_refused_whole() {
        let mut a = JobAttrs::default();
        let j = JobId(1);
        let e = a.set(j, pairs(&[("Ok", "1"), ("2bad", "1")])).unwrap_err();
        assert!(
            e.message.contains("`2bad` is not an attribute name"),
            "{e:?}"
        );
        let e = a.set(j, pairs(&[("Half", "(1 +")])).unwrap_err();
        assert!(e.message.contains("not a ClassAd expression"), "{e:?}");
        assert!(a.of(j).is_empty(), "nothing of a refused request is kept");
        let many: Vec<(String, String)> = (0..MAX_JOB_ATTRIBUTES)
            .map(|i| (format!("A{i}"), "1".to_string()))
            .collect();
        a.set(j, many).unwrap();
        a.set(j, pairs(&[("A0", "2")])).unwrap();
        let e = a.set(j, pairs(&[("OneMore", "1")])).unwrap_err();
        assert!(e.message.contains("above the limit"), "{e:?}");
    }
}
