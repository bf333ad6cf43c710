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

const JOB_KEYS: [&str; 7] = [
    "executable",
    "arguments",
    "output",
    "error",
    "transfer_input_files",
    "environment",
    "on_impossible",
];
const CLASS_KEYS: [&str; 4] = ["class_name", "requirements", "rank", "machine_count"];
/// Mistakes reported at most, so that a file of a million bad lines gives a
/// readable answer (and a small one on the wire).
const MAX_REPORTED: usize = 50;
const MACROS: [&str; 4] = ["cluster", "clusterid", "process", "procid"];

/// A logical line: continuation lines joined, with the line it started on.
struct Logical {
    line: usize,
    text: String,
}

fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out = Vec::new();
    let mut current: Option<Logical> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_end();
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (trimmed, false),
        };
        match current.as_mut() {
            Some(c) => {
                c.text.push(' ');
                c.text.push_str(body.trim_start());
            }
            None => {
                current = Some(Logical {
                    line: i + 1,
                    text: body.to_string(),
                })
            }
        }
        if !continues {
            out.extend(current.take());
        }
    }
    out.extend(current);
    out
}

#[derive(Default)]
struct ClassDraft {
    name: Option<String>,
    requirements: Option<String>,
    rank: Option<String>,
    count: Option<(u32, u32)>,
}

/// Parses `MIN..MAX` or `N`.
fn machine_count(value: &str) -> Result<(u32, u32), String> {
    let num = |s: &str| {
        s.trim().parse::<u32>().map_err(|_| {
            format!(
                "machine_count: `{}` is not a whole number of machines",
                s.trim()
            )
        })
    };
    let (min, max) = match value.split_once("..") {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(value)?;
            (n, n)
        }
    };
    if min > max {
        return Err(format!(
            "machine_count: the minimum {min} is above the maximum {max}; write MIN..MAX"
        ));
    }
    if max == 0 {
        return Err("machine_count: a class needs a maximum of at least 1 machine".into());
    }
    // Checked here, before anything is sized by it (the allocator places
    // every minimum machine at once).
    limits::check_machine_count("machine_count", max).map_err(|e| e.to_string())?;
    Ok((min, max))
}

/// Checks that every `$(...)` in `value` is a known macro.
fn check_macros(value: &str) -> Result<(), String> {
    let mut rest = value;
    while let Some(i) = rest.find("$(") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else {
            return Err(format!(
                "`{}` opens a macro that is never closed",
                &rest[i..]
            ));
        };
        let name = &after[..end];
        if !MACROS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "unknown macro `$({name})`; known: $(Cluster), $(Process)"
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// Splits arguments on white space; double quotes group words.
fn split_args(value: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    args.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err("arguments: a double quote is never closed".into());
    }
    if any {
        args.push(cur);
    }
    Ok(args)
}

fn environment(value: &str) -> Result<Vec<(String, String)>, String> {
    value
        .split(|c: char| c == ';' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("environment: `{pair}` is not NAME=VALUE")),
        })
        .collect()
}

fn check_expr(key: &str, value: &str) -> Result<(), String> {
    // Before parsing: a huge expression costs the parser (and every later
    // match against every machine) in proportion.
    limits::check_len(key, value, limits::MAX_EXPRESSION_BYTES).map_err(|e| e.to_string())?;
    classad::parse_expr(value).map(|_| ()).map_err(|e| {
        format!(
            "{key}: not a ClassAd expression (column {}: {})",
            e.column, e.message
        )
    })
}

/// Parses a submit file. `file` names it in messages. On any mistake, every
/// mistake found is returned and no job is described.
pub fn parse(file: &str, text: &str) -> Result<JobSpec, SubmitErrors> {
    if let Err(e) = limits::check_len("the file", text, limits::MAX_SUBMIT_FILE_BYTES) {
        return Err(SubmitErrors(vec![SubmitError {
            file: file.to_string(),
            line: 0,
            reason: e.to_string(),
        }]));
    }
    let mut errors = Vec::new();
    // Mistakes beyond a few times what is shown are only counted, so that a
    // file of a million bad lines costs no more memory than one of a thousand.
    let mut uncounted = 0usize;
    let mut err = |line: usize, reason: String| {
        if errors.len() >= 20 * MAX_REPORTED {
            uncounted += 1;
            return;
        }
        errors.push(SubmitError {
            file: file.to_string(),
            line,
            reason,
        })
    };
    let mut job: Vec<(&'static str, String, usize)> = Vec::new();
    let mut draft = ClassDraft::default();
    let mut classes: Vec<ClassSpec> = Vec::new();
    let mut class_keys_seen = false;
    let mut too_many_classes = false;
    let mut extras = crate::submit_condor::Extras::default();
    let mut count: Option<(u32, usize)> = None;
    for l in logical_lines(text) {
        let t = l.text.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t.eq_ignore_ascii_case("queue") || t.to_ascii_lowercase().starts_with("queue ") {
            let arg = t[5..].trim();
            if !arg.is_empty() {
                match arg.parse::<u32>() {
                    Ok(n) if (1..=limits::MAX_JOBS_PER_SUBMIT).contains(&n) => {
                        count = Some((n, l.line))
                    }
                    Ok(n) => err(
                        l.line,
                        format!(
                            "`queue {n}`: between 1 and {} copies of a job per submit file",
                            limits::MAX_JOBS_PER_SUBMIT
                        ),
                    ),
                    Err(_) => err(
                        l.line,
                        format!(
                            "`queue {arg}`: only `queue` and `queue N` are understood here (no `in`, `from` or `matching` lists)"
                        ),
                    ),
                }
            }
            let d = std::mem::take(&mut draft);
            class_keys_seen = false;
            if classes.len() >= limits::MAX_CLASSES_PER_JOB {
                // Reported once, at the first class too many; the rest are
                // not kept, so that a file of a million `queue` lines costs
                // no more than one of 64.
                if !too_many_classes {
                    too_many_classes = true;
                    let e = limits::check_count(
                        "queue",
                        classes.len() + 1,
                        limits::MAX_CLASSES_PER_JOB,
                        "classes",
                    );
                    err(l.line, e.err().map(|e| e.to_string()).unwrap_or_default());
                }
                continue;
            }
            let name = d.name.unwrap_or_else(|| format!("class{}", classes.len()));
            if let Some(prev) = classes.iter().find(|c| c.name == name) {
                err(
                    l.line,
                    format!(
                        "class `{name}` is already defined by the queue on line {}; give each class its own class_name",
                        prev.line
                    ),
                );
            }
            let (min, max) = d.count.unwrap_or((1, 1));
            classes.push(ClassSpec {
                name,
                requirements: d.requirements.unwrap_or_else(|| "true".into()),
                rank: d.rank,
                min,
                max,
                line: l.line,
            });
            continue;
        }
        let Some((key, value)) = t.split_once('=') else {
            err(
                l.line,
                format!("`{t}` is neither `key = value`, a comment nor `queue`"),
            );
            continue;
        };
        let key_lc = key.trim().to_ascii_lowercase();
        let value = value.trim().to_string();
        if let Some(&k) = JOB_KEYS.iter().find(|k| **k == key_lc) {
            if let Some((_, _, first)) = job.iter().find(|(n, _, _)| *n == k) {
                err(
                    l.line,
                    format!("`{k}` is set twice (first on line {first}); a job has one"),
                );
                continue;
            }
            if matches!(k, "arguments" | "output" | "error" | "environment")
                && let Err(e) = check_macros(&value)
            {
                err(l.line, format!("{k}: {e}"));
                continue;
            }
            job.push((k, value, l.line));
        } else if CLASS_KEYS.contains(&key_lc.as_str()) {
            class_keys_seen = true;
            let result = match key_lc.as_str() {
                "class_name" => {
                    if let Err(e) = limits::check_len("class_name", &value, limits::MAX_NAME_BYTES)
                    {
                        Err(e.to_string())
                    } else if value.is_empty()
                        || !value
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
                    {
                        Err(format!(
                            "class_name: `{value}` is not a name (letters, digits, `_` and `-`)"
                        ))
                    } else {
                        draft.name = Some(value);
                        Ok(())
                    }
                }
                "requirements" => {
                    check_expr("requirements", &value).map(|()| draft.requirements = Some(value))
                }
                "rank" => check_expr("rank", &value).map(|()| draft.rank = Some(value)),
                _ => machine_count(&value).map(|c| draft.count = Some(c)),
            };
            if let Err(e) = result {
                err(l.line, e);
            }
        } else if crate::submit_condor::is_condor_key(key) {
            if let Err(e) = extras.set(key, &value) {
                err(l.line, e);
            }
        } else {
            err(
                l.line,
                format!(
                    "unknown key `{}`; job keys: {}; class keys: {}; HTCondor commands: {}, +Name",
                    key.trim(),
                    JOB_KEYS.join(", "),
                    CLASS_KEYS.join(", "),
                    crate::submit_condor::KEYS.join(", ")
                ),
            );
        }
    }
    let last_line = text.lines().count();
    if let Some((n, line)) = count
        && n > 1
        && classes.len() > 1
    {
        err(
            line,
            format!(
                "`queue {n}` makes {n} copies of a one-class job; this file has {} classes (each `queue` closes one)",
                classes.len()
            ),
        );
    }
    extras.apply_requests(classes.iter_mut().map(|c| &mut c.requirements));
    if classes.is_empty() {
        err(
            last_line.max(1),
            "no `queue`: each resource class must be closed by a `queue` line".into(),
        );
    } else if class_keys_seen {
        err(
            last_line,
            "class keys after the last `queue` are not closed by one; add `queue` or remove them"
                .into(),
        );
    }
    let get = |k: &str| {
        job.iter()
            .find(|(n, _, _)| *n == k)
            .map(|(_, v, l)| (v.clone(), *l))
    };
    let executable = match get("executable") {
        Some((v, _)) if !v.is_empty() => v,
        Some((_, line)) => {
            err(line, "executable: the path is empty".into());
            String::new()
        }
        None => {
            err(
                0,
                "missing `executable = PATH`: every job needs a master program".into(),
            );
            String::new()
        }
    };
    let on_impossible = match get("on_impossible") {
        None => OnImpossible::Wait,
        Some((v, line)) => OnImpossible::parse(&v).unwrap_or_else(|e| {
            err(line, e);
            OnImpossible::Wait
        }),
    };
    let arguments = match get("arguments") {
        Some((v, line)) => split_args(&v).unwrap_or_else(|e| {
            err(line, e);
            Vec::new()
        }),
        None => Vec::new(),
    };
    let env = match get("environment") {
        Some((v, line)) => environment(&v).unwrap_or_else(|e| {
            err(line, e);
            Vec::new()
        }),
        None => Vec::new(),
    };
    let transfer: Vec<String> = get("transfer_input_files")
        .map(|(v, _)| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let (output, error) = (get("output").map(|x| x.0), get("error").map(|x| x.0));
    let line_of = |k: &str| get(k).map_or(0, |(_, l)| l);
    for (key, max) in [
        ("executable", limits::MAX_PATH_BYTES),
        ("output", limits::MAX_PATH_BYTES),
        ("error", limits::MAX_PATH_BYTES),
    ] {
        if let Some((v, line)) = get(key)
            && let Err(e) = limits::check_len(key, &v, max)
        {
            err(line, e.to_string());
        }
    }
    let transfer_line = line_of("transfer_input_files");
    if let Err(e) = limits::check_count(
        "transfer_input_files",
        transfer.len(),
        limits::MAX_INPUT_FILES,
        "files",
    ) {
        err(transfer_line, e.to_string());
    } else if let Some(e) = transfer
        .iter()
        .find_map(|f| limits::check_len("transfer_input_files", f, limits::MAX_PATH_BYTES).err())
    {
        err(transfer_line, e.to_string());
    }
    if let Err(e) = limits::check_command_line("arguments", &arguments, &env) {
        let line = if e.field.starts_with("environment") {
            line_of("environment")
        } else {
            line_of("arguments")
        };
        err(line, e.to_string());
    }
    if let Err(e) = check_expressions_of_job(&classes) {
        err(classes.last().map_or(0, |c| c.line), e.to_string());
    }
    let minimum: u64 = classes.iter().map(|c| u64::from(c.min)).sum();
    if minimum > limits::MAX_MINIMUM_PER_JOB {
        let e = LimitError {
            field: "machine_count (minimums of all classes)".into(),
            value: minimum.to_string(),
            limit: format!("{} machines per job", limits::MAX_MINIMUM_PER_JOB),
        };
        err(classes.last().map_or(0, |c| c.line), e.to_string());
    }
    if !errors.is_empty() {
        errors.sort_by_key(|e| e.line);
        if errors.len() > MAX_REPORTED {
            let more = errors.len() - MAX_REPORTED + uncounted;
            errors.truncate(MAX_REPORTED);
            errors.push(SubmitError {
                file: file.to_string(),
                line: 0,
                reason: format!("and {more} more mistakes"),
            });
        }
        return Err(SubmitErrors(errors));
    }
    Ok(JobSpec {
        executable,
        arguments,
        output,
        error,
        transfer_input_files: transfer,
        environment: env,
        classes,
        attributes: extras.job_attributes(),
        initial_dir: extras.initial_dir,
        log: extras.log,
        transfer_output_files: extras.transfer_output_files,
        master_requirements: extras.master_requirements,
        input_refs: Vec::new(),
        count: count.map_or(1, |(n, _)| n),
        on_impossible,
    })
}

/// Replaces the macros of one value; with no `cluster`, `$(Cluster)` stays.
fn expand_one(value: &str, cluster: impl Into<Option<u64>>, process: usize) -> String {
    let cluster = cluster.into();
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find("$(") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        match after[..end].to_ascii_lowercase().as_str() {
            "cluster" | "clusterid" => match cluster {
                Some(c) => out.push_str(&c.to_string()),
                None => out.push_str(&format!("$({})", &after[..end])),
            },
            "process" | "procid" => out.push_str(&process.to_string()),
            other => out.push_str(&format!("$({other})")),
        }
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

impl JobSpec {
    /// Copy `process` of a `queue N` file, a job of its own: `$(Process)`
    /// replaced by `process`, `$(Cluster)` left for the pool to fill.
    pub fn copy(&self, process: usize) -> JobSpec {
        let x = |v: &str| expand_one(v, None, process);
        JobSpec {
            arguments: self.arguments.iter().map(|a| x(a)).collect(),
            output: self.output.as_deref().map(x),
            error: self.error.as_deref().map(x),
            environment: self
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), x(v)))
                .collect(),
            log: self.log.as_deref().map(x),
            count: 1,
            ..self.clone()
        }
    }

    /// The spec with `$(Cluster)` replaced by `cluster` and `$(Process)` by 0
    /// (the master) in its arguments, output, error and environment.
    pub fn expand(&self, cluster: u64) -> JobSpec {
        let x = |v: &str| expand_one(v, cluster, 0);
        JobSpec {
            arguments: self.arguments.iter().map(|a| x(a)).collect(),
            output: self.output.as_deref().map(x),
            error: self.error.as_deref().map(x),
            environment: self
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), x(v)))
                .collect(),
            ..self.clone()
        }
    }
}

#[cfg(test)]
#[path = "submit_tests.rs"]
mod tests;
