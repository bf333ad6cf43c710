//! The checker of one job's settings: one pass over `key = value` lines (macros
//! already expanded by [`super::cluster`]) gathers the
//! job keys, the classes (each closed by a `queue`) and the HTCondor commands;
//! then the whole is checked against the limits and assembled into a
//! [`JobSpec`]. Every mistake is collected with its line, none stops the pass.

use super::commands::{self, Cmd};
use super::words::{environment, split_args};
use super::{
    ClassSpec, JobSpec, OnImpossible, SubmitError, SubmitErrors, check_expressions_of_job,
};
use crate::bounds::{self as limits, LimitError};
use crate::submit_condor::Extras;

/// Mistakes reported at most, so that a file of a million bad lines gives a
/// readable answer (and a small one on the wire).
const MAX_REPORTED: usize = 50;

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

/// The mistakes of one file, kept in bounds.
struct Mistakes<'f> {
    file: &'f str,
    errors: Vec<SubmitError>,
    /// Mistakes beyond a few times what is shown are only counted, so that a
    /// file of a million bad lines costs no more memory than one of a thousand.
    uncounted: usize,
}

impl Mistakes<'_> {
    fn push(&mut self, line: usize, reason: String) {
        if self.errors.len() >= 20 * MAX_REPORTED {
            self.uncounted += 1;
            return;
        }
        self.errors.push(SubmitError {
            file: self.file.to_string(),
            line,
            reason,
        })
    }

    /// Nothing when there is no mistake; else the first [`MAX_REPORTED`] in
    /// line order and how many more.
    fn into_result(mut self) -> Result<(), SubmitErrors> {
        if self.errors.is_empty() {
            return Ok(());
        }
        self.errors.sort_by_key(|e| e.line);
        if self.errors.len() > MAX_REPORTED {
            let more = self.errors.len() - MAX_REPORTED + self.uncounted;
            self.errors.truncate(MAX_REPORTED);
            self.errors.push(SubmitError {
                file: self.file.to_string(),
                line: 0,
                reason: format!("and {more} more mistakes"),
            });
        }
        Err(SubmitErrors(self.errors))
    }
}

/// What the pass over the lines has gathered so far.
pub(super) struct Parser<'f> {
    mistakes: Mistakes<'f>,
    /// Job keys as given: key, value, line.
    job: Vec<(&'static str, String, usize)>,
    /// The class being described, closed by the next `queue`.
    draft: ClassDraft,
    classes: Vec<ClassSpec>,
    /// Whether a class key was given since the last `queue`.
    class_keys_seen: bool,
    /// Whether the class limit was reported (once, at the first class too many).
    too_many_classes: bool,
    extras: Extras,
    /// `queue N`: N and its line.
    count: Option<(u32, usize)>,
}

/// The job keys, read and checked one by one.
struct JobFields {
    executable: String,
    arguments: Vec<String>,
    output: Option<String>,
    error: Option<String>,
    transfer: Vec<String>,
    env: Vec<(String, String)>,
    on_impossible: OnImpossible,
}

impl<'f> Parser<'f> {
    pub(super) fn new(file: &'f str) -> Self {
        Parser {
            mistakes: Mistakes {
                file,
                errors: Vec::new(),
                uncounted: 0,
            },
            job: Vec::new(),
            draft: ClassDraft::default(),
            classes: Vec::new(),
            class_keys_seen: false,
            too_many_classes: false,
            extras: Extras::default(),
            count: None,
        }
    }

    pub(super) fn err(&mut self, line: usize, reason: String) {
        self.mistakes.push(line, reason);
    }

    /// One logical line, trimmed.
    pub(super) fn line(&mut self, line: usize, t: &str) {
        if t.is_empty() || t.starts_with('#') {
            return;
        }
        if t.eq_ignore_ascii_case("queue") || t.to_ascii_lowercase().starts_with("queue ") {
            self.queue_count(line, t[5..].trim());
            self.close_class(line);
            return;
        }
        let Some((key, value)) = t.split_once('=') else {
            self.err(
                line,
                format!("`{t}` is neither `key = value`, a comment nor `queue`"),
            );
            return;
        };
        let value = value.trim().to_string();
        match commands::lookup(key) {
            Some(Cmd::Job(k)) => self.job_key(line, k, value),
            Some(Cmd::Class(k)) => {
                self.class_keys_seen = true;
                if let Err(e) = self.class_key(k, value) {
                    self.err(line, e);
                }
            }
            Some(Cmd::Condor(k)) => {
                let k = if k == "+" { key } else { k };
                if let Err(e) = self.extras.set(k, &value) {
                    self.err(line, e);
                }
            }
            Some(Cmd::Attr(name, kind)) => match commands::attr_value(key.trim(), kind, &value) {
                Ok(v) => self.extras.set_attr(name, v),
                Err(e) => self.err(line, e),
            },
            Some(Cmd::Refuse(why)) => self.err(line, format!("{}: {why}", key.trim())),
            // Ignored commands, and user macros (read where they are used).
            Some(Cmd::Ignore(_)) | None => {}
        }
    }

    /// The `N` of `queue N`, if given.
    fn queue_count(&mut self, line: usize, arg: &str) {
        if arg.is_empty() {
            return;
        }
        match arg.parse::<u32>() {
            Ok(n) if (1..=limits::MAX_JOBS_PER_SUBMIT).contains(&n) => {
                self.count = Some((n, line))
            }
            Ok(n) => self.err(
                line,
                format!(
                    "`queue {n}`: between 1 and {} copies of a job per submit file",
                    limits::MAX_JOBS_PER_SUBMIT
                ),
            ),
            Err(_) => self.err(
                line,
                format!(
                    "`queue {arg}`: a file with CARMI class keys (class_name, machine_count) takes only `queue` and `queue N`; for lists of items write an HTCondor file without them"
                ),
            ),
        }
    }

    /// A `queue` closes the class being described.
    fn close_class(&mut self, line: usize) {
        let d = std::mem::take(&mut self.draft);
        self.class_keys_seen = false;
        if self.classes.len() >= limits::MAX_CLASSES_PER_JOB {
            // Reported once, at the first class too many; the rest are
            // not kept, so that a file of a million `queue` lines costs
            // no more than one of 64.
            if !self.too_many_classes {
                self.too_many_classes = true;
                let e = limits::check_count(
                    "queue",
                    self.classes.len() + 1,
                    limits::MAX_CLASSES_PER_JOB,
                    "classes",
                );
                self.err(line, e.err().map(|e| e.to_string()).unwrap_or_default());
            }
            return;
        }
        let name = d
            .name
            .unwrap_or_else(|| format!("class{}", self.classes.len()));
        if let Some(prev) = self.classes.iter().find(|c| c.name == name) {
            let reason = format!(
                "class `{name}` is already defined by the queue on line {}; give each class its own class_name",
                prev.line
            );
            self.err(line, reason);
        }
        let (min, max) = d.count.unwrap_or((1, 1));
        self.classes.push(ClassSpec {
            name,
            requirements: d.requirements.unwrap_or_else(|| "true".into()),
            rank: d.rank,
            min,
            max,
            line,
        });
    }

    /// A job key, once per file; macros only where they are expanded.
    fn job_key(&mut self, line: usize, k: &'static str, value: String) {
        if let Some((_, _, first)) = self.job.iter().find(|(n, _, _)| *n == k) {
            let reason = format!("`{k}` is set twice (first on line {first}); a job has one");
            self.err(line, reason);
            return;
        }
        self.job.push((k, value, line));
    }

    /// A class key (`key_lc` in lower case), into the class being described.
    fn class_key(&mut self, key_lc: &str, value: String) -> Result<(), String> {
        match key_lc {
            "class_name" => {
                limits::check_len("class_name", &value, limits::MAX_NAME_BYTES)
                    .map_err(|e| e.to_string())?;
                if value.is_empty()
                    || !value
                        .chars()
                        .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
                {
                    return Err(format!(
                        "class_name: `{value}` is not a name (letters, digits, `_` and `-`)"
                    ));
                }
                self.draft.name = Some(value);
                Ok(())
            }
            "requirements" => {
                check_expr("requirements", &value).map(|()| self.draft.requirements = Some(value))
            }
            "rank" => check_expr("rank", &value).map(|()| self.draft.rank = Some(value)),
            _ => machine_count(&value).map(|c| self.draft.count = Some(c)),
        }
    }

    /// The value and line of a job key, if given.
    fn get(&self, k: &str) -> Option<(String, usize)> {
        self.job
            .iter()
            .find(|(n, _, _)| *n == k)
            .map(|(_, v, l)| (v.clone(), *l))
    }

    fn line_of(&self, k: &str) -> usize {
        self.get(k).map_or(0, |(_, l)| l)
    }

    /// After the last line: the file as a whole, then the job.
    pub(super) fn finish(mut self, last_line: usize) -> Result<JobSpec, SubmitErrors> {
        self.check_classes(last_line);
        let fields = self.job_fields();
        self.check_job_limits(&fields);
        self.check_class_limits();
        let Parser {
            mistakes,
            classes,
            extras,
            count,
            ..
        } = self;
        mistakes.into_result()?;
        Ok(JobSpec {
            executable: fields.executable,
            arguments: fields.arguments,
            output: fields.output,
            error: fields.error,
            transfer_input_files: fields.transfer,
            environment: fields.env,
            classes,
            attributes: extras.job_attributes(),
            initial_dir: extras.initial_dir,
            log: extras.log,
            transfer_output_files: extras.transfer_output_files,
            master_requirements: extras.master_requirements,
            max_start_failures: extras.max_start_failures,
            checkpoint_exit_code: extras.checkpoint_exit_code,
            transfer_checkpoint_files: extras.transfer_checkpoint_files,
            output_on_evict: extras.output_on_evict,
            input_refs: Vec::new(),
            count: count.map_or(1, |(n, _)| n),
            on_impossible: fields.on_impossible,
        })
    }

    /// The classes together: `queue N` needs one, at least one is needed,
    /// and none may be left open; the resource requests join each.
    fn check_classes(&mut self, last_line: usize) {
        if let Some((n, line)) = self.count
            && n > 1
            && self.classes.len() > 1
        {
            let reason = format!(
                "`queue {n}` makes {n} copies of a one-class job; this file has {} classes (each `queue` closes one)",
                self.classes.len()
            );
            self.err(line, reason);
        }
        self.extras
            .apply_requests(self.classes.iter_mut().map(|c| &mut c.requirements));
        if self.classes.is_empty() {
            self.err(
                last_line.max(1),
                "no `queue`: each resource class must be closed by a `queue` line".into(),
            );
        } else if self.class_keys_seen {
            self.err(
                last_line,
                "class keys after the last `queue` are not closed by one; add `queue` or remove them"
                    .into(),
            );
        }
    }

    /// Each job key read into its field (a mistake leaves the field empty).
    fn job_fields(&mut self) -> JobFields {
        let executable = match self.get("executable") {
            Some((v, _)) if !v.is_empty() => v,
            Some((_, line)) => {
                self.err(line, "executable: the path is empty".into());
                String::new()
            }
            None => {
                self.err(
                    0,
                    "missing `executable = PATH`: every job needs a master program".into(),
                );
                String::new()
            }
        };
        let on_impossible = match self.get("on_impossible") {
            None => OnImpossible::Wait,
            Some((v, line)) => OnImpossible::parse(&v).unwrap_or_else(|e| {
                self.err(line, e);
                OnImpossible::Wait
            }),
        };
        let arguments = match self.get("arguments") {
            Some((v, line)) => split_args(&v).unwrap_or_else(|e| {
                self.err(line, e);
                Vec::new()
            }),
            None => Vec::new(),
        };
        let env = match self.get("environment") {
            Some((v, line)) => environment(&v).unwrap_or_else(|e| {
                self.err(line, e);
                Vec::new()
            }),
            None => Vec::new(),
        };
        let transfer: Vec<String> = self
            .get("transfer_input_files")
            .map(|(v, _)| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        JobFields {
            executable,
            arguments,
            output: self.get("output").map(|x| x.0),
            error: self.get("error").map(|x| x.0),
            transfer,
            env,
            on_impossible,
        }
    }

    /// The job's paths, input files and command line against their limits.
    fn check_job_limits(&mut self, f: &JobFields) {
        for key in ["executable", "output", "error"] {
            if let Some((v, line)) = self.get(key)
                && let Err(e) = limits::check_len(key, &v, limits::MAX_PATH_BYTES)
            {
                self.err(line, e.to_string());
            }
        }
        let transfer_line = self.line_of("transfer_input_files");
        if let Err(e) = limits::check_count(
            "transfer_input_files",
            f.transfer.len(),
            limits::MAX_INPUT_FILES,
            "files",
        ) {
            self.err(transfer_line, e.to_string());
        } else if let Some(e) = f.transfer.iter().find_map(|p| {
            limits::check_len("transfer_input_files", p, limits::MAX_PATH_BYTES).err()
        }) {
            self.err(transfer_line, e.to_string());
        }
        if let Err(e) = limits::check_command_line("arguments", &f.arguments, &f.env) {
            let line = if e.field.starts_with("environment") {
                self.line_of("environment")
            } else {
                self.line_of("arguments")
            };
            self.err(line, e.to_string());
        }
    }

    /// The classes' expressions and minimums together against their limits.
    fn check_class_limits(&mut self) {
        let last = self.classes.last().map_or(0, |c| c.line);
        if let Err(e) = check_expressions_of_job(&self.classes) {
            self.err(last, e.to_string());
        }
        let minimum: u64 = self.classes.iter().map(|c| u64::from(c.min)).sum();
        if minimum > limits::MAX_MINIMUM_PER_JOB {
            let e = LimitError {
                field: "machine_count (minimums of all classes)".into(),
                value: minimum.to_string(),
                limit: format!("{} machines per job", limits::MAX_MINIMUM_PER_JOB),
            };
            self.err(last, e.to_string());
        }
    }
}
