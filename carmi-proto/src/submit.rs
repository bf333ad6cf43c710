//! Submit files: the `key = value` description of a job, in the style
//! HTCondor users know. Pure: text in, a [`JobSpec`] or a list of
//! [`SubmitError`]s (file, line, reason) out, so that the `carmi` command can
//! reject a bad file before it reaches the pool and the global RM can check
//! what it is sent with the same code.
//!
//! # Format
//! - One `key = value` per line; keys are case-insensitive. `#` starts a
//!   comment line; a line ending in `\` continues on the next.
//! - Job keys, once per file: `executable` (required), `arguments`, `output`,
//!   `error`, `transfer_input_files` (comma-separated), `environment`
//!   (`NAME=VALUE` pairs separated by `;` or spaces).
//! - Class keys, reset by every `queue`: `class_name`, `requirements` and
//!   `rank` (ClassAd expressions), `machine_count` (`N` or `MIN..MAX`).
//! - Each `queue` closes one resource class; at least one is needed. A file
//!   with a single `queue N` describes N copies of the job (one cluster;
//!   `$(Process)` numbers them).
//! - The commands of HTCondor's vanilla universe users write every day
//!   (`universe`, `request_*`, `+Name`, `JobBatchName`, `initialdir`, `log`,
//!   the file-transfer settings) are read by [`crate::submit_condor`].
//! - Macros `$(Cluster)` (the job id, also `$(ClusterId)`) and `$(Process)`
//!   (the process number; 0 for the master, also `$(ProcId)`) may appear in `arguments`,
//!   `output`, `error` and `environment`; [`JobSpec::expand`] replaces them once
//!   the job id is known. Any other `$(...)` is a mistake.
//!
//! # Limits
//! Every number and size is checked against [`crate::limits`] (machines per
//! class, classes per job, argument and environment bytes, path and
//! expression lengths, file size), so that a file the parser accepts is never
//! refused by the pool for a limit.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bounds::{self as limits, LimitError, over};
pub use crate::submit_options::OnImpossible;
pub use cluster::{ClusterSpec, parse, parse_cluster};
pub use env::{FixedEnv, SubmitEnv};
pub use words::{join_args, join_environment};

mod cluster;
mod commands;
mod env;
mod lang;
mod macros;
mod parser;
mod queue;
mod words;

/// One resource class of a job: which machines, how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSpec {
    /// Its name, unique within the job.
    pub name: String,
    /// ClassAd expression a machine must satisfy (`true` when not given).
    pub requirements: String,
    /// ClassAd expression ranking machines, if given.
    pub rank: Option<String>,
    /// Fewest machines the job can start with.
    pub min: u32,
    /// Most machines the job can use.
    pub max: u32,
    /// Line of the `queue` that closed it, for messages.
    pub line: usize,
}

/// A job as a submit file describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Path of the master's executable, as written (relative to the submit directory).
    pub executable: String,
    /// Arguments of the master, split on white space (double quotes group).
    pub arguments: Vec<String>,
    /// Where the master's standard output goes, if given.
    pub output: Option<String>,
    /// Where the master's standard error goes, if given.
    pub error: Option<String>,
    /// Files sent beside the executable.
    pub transfer_input_files: Vec<String>,
    /// Environment of the master.
    pub environment: Vec<(String, String)>,
    /// The resource classes, in file order.
    pub classes: Vec<ClassSpec>,
    /// Job attributes for the job ad (`+Name = value`, `JobBatchName`,
    /// `RequestCpus`...): `(name, ClassAd expression text)`.
    #[serde(default)]
    pub attributes: Vec<(String, String)>,
    /// `initialdir`: where relative paths start (else the submit file's directory).
    #[serde(default)]
    pub initial_dir: Option<String>,
    /// `log`: the job's event log, as written.
    #[serde(default)]
    pub log: Option<String>,
    /// `transfer_output_files`, as written.
    #[serde(default)]
    pub transfer_output_files: Vec<String>,
    /// `master_requirements`: a ClassAd expression over machine ads; where
    /// the global RM may place the master of a job submitted from outside
    /// the pool (`None`: any machine).
    #[serde(default)]
    pub master_requirements: Option<String>,
    /// The `transfer_input_files` by content (file name, SHA-256, size),
    /// uploaded by `carmi submit` with the executable: a master the global
    /// RM places on another machine gets them from the pool, as it gets its
    /// executable. Empty from the parser and from older clients.
    #[serde(default)]
    pub input_refs: Vec<crate::exe::ExecutableRef>,
    /// `max_start_failures`: how many times the master may fail to start
    /// for a reason of the job (its executable does not run) before the job
    /// is held (`None`: the pool's default, 3).
    #[serde(default)]
    pub max_start_failures: Option<u32>,
    /// `checkpoint_exit_code`: the master exiting with it has written a
    /// checkpoint (HTCondor's self-checkpointing jobs).
    #[serde(default)]
    pub checkpoint_exit_code: Option<i32>,
    /// `transfer_checkpoint_files`: the checkpoint's files, plain names in
    /// the master's sandbox (empty: its `transfer_output_files`).
    #[serde(default)]
    pub transfer_checkpoint_files: Vec<String>,
    /// `when_to_transfer_output = ON_EXIT_OR_EVICT`: a vacated master's
    /// output files are kept as its checkpoint.
    #[serde(default)]
    pub output_on_evict: bool,
    /// `queue N`: how many copies of the job the file describes.
    #[serde(default = "one")]
    pub count: u32,
    /// `on_impossible`: what the global RM does with a job whose minimums
    /// no set of machines in the pool could meet at submit.
    #[serde(default)]
    pub on_impossible: OnImpossible,
}

fn one() -> u32 {
    1
}

/// The requirements and ranks of all of a job's classes together are at most
/// [`MAX_EXPRESSION_BYTES_PER_JOB`](crate::limits::MAX_EXPRESSION_BYTES_PER_JOB);
/// also `carmi_proto::limits::check_expressions_of_job`.
pub fn check_expressions_of_job(classes: &[ClassSpec]) -> Result<(), LimitError> {
    let total: usize = classes
        .iter()
        .map(|c| c.requirements.len() + c.rank.as_ref().map_or(0, String::len))
        .sum();
    let max = limits::MAX_EXPRESSION_BYTES_PER_JOB;
    if total > max {
        return Err(over(
            "requirements and rank of all classes",
            format!("{total} bytes"),
            format!("{max} bytes per job"),
        ));
    }
    Ok(())
}

/// One mistake in a submit file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitError {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line (0 when the mistake concerns the whole file).
    pub line: usize,
    /// What is wrong and how to fix it.
    pub reason: String,
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.reason)
        }
    }
}

/// Every mistake of a file, in line order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct SubmitErrors(pub Vec<SubmitError>);

impl fmt::Display for SubmitErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Replaces `$(Cluster)`/`$(ClusterId)` (when `cluster` is given) and
/// `$(Process)`/`$(ProcId)`/`$(Step)` (when `process` is) in one value;
/// everything else, `$$(Attr)` included, stays as written.
fn expand_one(value: &str, cluster: Option<u64>, process: Option<usize>) -> String {
    if !value.contains("$(") {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find("$(") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        out.push_str(&rest[..i]);
        let whole = &rest[i..i + 2 + end + 1];
        let match_time = i > 0 && rest.as_bytes()[i - 1] == b'$';
        match (after[..end].to_ascii_lowercase().as_str(), match_time) {
            ("cluster" | "clusterid", false) if cluster.is_some() => {
                out.push_str(&cluster.unwrap_or_default().to_string())
            }
            ("process" | "procid" | "step", false) if process.is_some() => {
                out.push_str(&process.unwrap_or_default().to_string())
            }
            _ => out.push_str(whole),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

impl JobSpec {
    /// The `request_memory` and `request_cpus` the submit file asked for,
    /// read back from the job attributes they became (`RequestMemory`,
    /// `RequestCpus`: integers, as [`crate::submit_condor`] writes them), so
    /// that specs journaled before the requests were enforced bind too.
    pub fn requests(&self) -> crate::outcome::Requests {
        let int = |name: &str| {
            self.attributes
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
                .filter(|&v| v > 0)
        };
        crate::outcome::Requests {
            memory_mib: int("RequestMemory"),
            cpus: int("RequestCpus"),
        }
    }

    /// Copy `process` of a CARMI file's `queue N`, a proc of its own:
    /// `$(Process)` replaced by `process` wherever values are expanded,
    /// `$(ClusterId)` left for the pool to fill.
    pub fn copy(&self, process: usize) -> JobSpec {
        let mut spec = self.map_values(|v| expand_one(v, None, Some(process)));
        spec.count = 1;
        spec
    }

    /// The spec with `$(ClusterId)` (and `$(Cluster)`) replaced by
    /// `cluster` wherever values are expanded: arguments, output, error,
    /// log, environment, job attributes and transferred files; nothing else.
    pub fn expand(&self, cluster: u64) -> JobSpec {
        self.map_values(|v| expand_one(v, Some(cluster), None))
    }

    /// The spec with `x` applied to every value where macros are expanded.
    fn map_values(&self, x: impl Fn(&str) -> String) -> JobSpec {
        let list = |l: &[String]| l.iter().map(|v| x(v)).collect::<Vec<_>>();
        JobSpec {
            arguments: list(&self.arguments),
            output: self.output.as_deref().map(&x),
            error: self.error.as_deref().map(&x),
            log: self.log.as_deref().map(&x),
            environment: self
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), x(v)))
                .collect(),
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), x(v)))
                .collect(),
            transfer_input_files: list(&self.transfer_input_files),
            transfer_output_files: list(&self.transfer_output_files),
            initial_dir: self.initial_dir.as_deref().map(&x),
            ..self.clone()
        }
    }
}

#[cfg(test)]
#[path = "submit_tests.rs"]
mod tests;
