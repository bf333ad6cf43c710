//! Limits on every number and size a client sends: submit files, admin
//! requests, application requests, attach ids and machine names. Each is
//! checked where the message arrives, before any work depends on it, and a
//! value above its limit is refused with a [`LimitError`] naming the field,
//! the value and the limit (e.g. "machine_count: 4294967295 is above the
//! limit of 100000 machines per class").
//!
//! Pure: the submit-file parser ([`crate::submit`]) and the global RM call
//! the same checks, so a file `carmi submit` accepts is never refused by the
//! pool for a limit, and a client that skips the parser is refused all the same.
//!
//! The values are far above what real jobs use (a pool of this kind has
//! hundreds to a few thousand machines) and far below what would make one
//! request cost the global RM more than a few megabytes or milliseconds.

use std::fmt;

use crate::msg::{ExecutableRef, Failure, FailureCode, Request, SubmitRequest};
use crate::submit::JobSpec;

/// Most machines one class of a job may ask for (`machine_count`, `AddHosts`
/// count): a hundred times the largest pools this broker targets, yet small
/// enough that the allocator's per-machine work for one job stays bounded.
pub const MAX_MACHINES_PER_CLASS: u32 = 100_000;
/// Most machines a job's minimums may add up to over all its classes: the
/// allocator places every minimum machine at once when the job starts.
pub const MAX_MINIMUM_PER_JOB: u64 = MAX_MACHINES_PER_CLASS as u64;
/// Most custom attributes of one job (`+Name = value` and the like).
pub const MAX_JOB_ATTRIBUTES: usize = 256;
/// Most copies of a job one submit file makes (`queue N`).
pub const MAX_JOBS_PER_SUBMIT: u32 = 10_000;
/// Most resource classes in one job (each `queue` line of a submit file,
/// each class defined at run time with `DefineClass`); every class is
/// matched against every machine.
pub const MAX_CLASSES_PER_JOB: usize = 64;
/// Longest single argument or environment entry, in bytes: Linux refuses a
/// string longer than `MAX_ARG_STRLEN` (32 pages, 131072 bytes with its NUL)
/// at `exec`, so a longer one could never start.
pub const MAX_ARG_BYTES: usize = 131_071;
/// Most bytes of arguments and environment together: Linux's `ARG_MAX` is
/// commonly 2 MiB (a quarter of an 8 MiB stack), which the local RM's own
/// environment and the pointers share; 1 MiB leaves room for them.
pub const MAX_COMMAND_LINE_BYTES: usize = 1 << 20;
/// Most arguments of one process.
pub const MAX_ARGS: usize = 32_768;
/// Most environment entries of one process.
pub const MAX_ENV_VARS: usize = 4_096;
/// Longest name (owner, machine, class, executable file name), in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest path (executable, output, error, input files), in bytes: Linux's `PATH_MAX` less its NUL.
pub const MAX_PATH_BYTES: usize = 4_095;
/// Longest ClassAd expression (requirements, rank, `DefineClass`), in bytes:
/// every expression is evaluated against every machine, in the router's one
/// task. Real ones are well under 1 KiB.
pub const MAX_EXPRESSION_BYTES: usize = 16_384;
/// Most bytes of expressions (requirements and ranks) of all the classes of
/// one submitted job together: a job's classes are all evaluated against
/// every machine when it tries to start. 64 classes of 57 KiB expressions on
/// 100 machines took 2.8 s to schedule (debug build); 64 KiB in all bounds
/// that to what one 64 KiB expression costs.
pub const MAX_EXPRESSION_BYTES_PER_JOB: usize = 65_536;
/// Most `transfer_input_files` of one job (each is copied before the master starts).
pub const MAX_INPUT_FILES: usize = 1_000;
/// Most bytes of `transfer_input_files` together that `carmi submit`
/// uploads for a master placed on another machine: they travel through the
/// global RM's store, held in memory on the way; larger data belongs on a
/// shared file system or with the workers.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;
/// Largest submit file, in bytes (one `carmi submit` message carries it all).
pub const MAX_SUBMIT_FILE_BYTES: usize = 16 << 20;
/// Largest executable, in bytes: it travels in one frame, whose limit is
/// `carmi_api::frame::DEFAULT_MAX_FRAME` (256 MiB) with room left for the header.
pub const MAX_EXECUTABLE_BYTES: u64 = 255 << 20;
/// Most hosts one request names (`DelHosts`, the notifications, `ExcludeHosts`).
pub const MAX_HOSTS_PER_REQUEST: usize = MAX_MACHINES_PER_CLASS as usize;
/// Most requests one job may have outstanding at once (pending `AddHosts`
/// and notification subscriptions together): every host event is checked
/// against the job's subscriptions, so their number bounds its cost. A
/// WoDi master holds three per group of hosts it was given.
pub const MAX_OUTSTANDING_PER_JOB: usize = 100_000;
/// Most slots one machine may advertise: the global RM keeps an entry per
/// slot (its default `RouterConfig::max_slots`).
pub const MAX_SLOTS_PER_MACHINE: u32 = 1_024;
/// Largest job or process id a client may name (2^53, the largest integer
/// every JSON reader keeps exact): ids are counters, and adopting one near
/// `u64::MAX` would move the counter to its end, where the next id overflows.
pub const MAX_ID: u64 = 1 << 53;
/// Longest failure reason kept (a master's `exec` error in `carmi history`),
/// in bytes; a longer one is cut, not refused: it is a report, not a request.
pub const MAX_REASON_BYTES: usize = 4_096;
/// Most bytes a job's master sends back to its submit directory (`output`,
/// `error` and `transfer_output_files` together). Each file gets an equal
/// share of what the files before it left over; a larger file is cut to its
/// share and marked truncated (the rest stays in the local RM's log of the
/// job, not in the submit directory).
pub const MAX_RETURNED_BYTES: u64 = 64 << 20;
/// Most files a master sends back (`transfer_output_files` plus output and error).
pub const MAX_RETURNED_FILES: usize = 256;
/// Most bytes of returned files the global RM keeps over every job of its
/// history; the oldest job's files go first beyond it (the history record stays).
pub const MAX_KEPT_FILES_BYTES: u64 = 4 << 30;

/// A value above its limit: which field, what it was, what the limit is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitError {
    /// The field, as a user would name it (`machine_count`, `class `w`: requirements`).
    pub field: String,
    /// The value, or its size.
    pub value: String,
    /// The limit with its unit (`100000 machines per class`).
    pub limit: String,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} is above the limit of {}",
            self.field, self.value, self.limit
        )
    }
}

impl std::error::Error for LimitError {}

fn over(
    field: impl Into<String>,
    value: impl fmt::Display,
    limit: impl Into<String>,
) -> LimitError {
    LimitError {
        field: field.into(),
        value: value.to_string(),
        limit: limit.into(),
    }
}

/// `text` is at most `max` bytes.
pub fn check_len(field: &str, text: &str, max: usize) -> Result<(), LimitError> {
    if text.len() > max {
        return Err(over(
            field,
            format!("{} bytes", text.len()),
            format!("{max} bytes"),
        ));
    }
    Ok(())
}

/// `count` items of `what` are at most `max`.
pub fn check_count(field: &str, count: usize, max: usize, what: &str) -> Result<(), LimitError> {
    if count > max {
        return Err(over(
            field,
            format!("{count} {what}"),
            format!("{max} {what}"),
        ));
    }
    Ok(())
}

/// A class's `machine_count` (either bound) is at most [`MAX_MACHINES_PER_CLASS`].
pub fn check_machine_count(field: &str, n: u32) -> Result<(), LimitError> {
    if n > MAX_MACHINES_PER_CLASS {
        return Err(over(
            field,
            n,
            format!("{MAX_MACHINES_PER_CLASS} machines per class"),
        ));
    }
    Ok(())
}

/// A process's arguments and environment fit what `exec` accepts:
/// [`MAX_ARGS`], [`MAX_ENV_VARS`], [`MAX_ARG_BYTES`] each and
/// [`MAX_COMMAND_LINE_BYTES`] in all. `field` names the arguments in messages.
pub fn check_command_line(
    field: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<(), LimitError> {
    check_count(field, args.len(), MAX_ARGS, "arguments")?;
    check_count("environment", env.len(), MAX_ENV_VARS, "variables")?;
    let per_arg = "bytes per argument (Linux's MAX_ARG_STRLEN)";
    let mut total = 0usize;
    for (i, a) in args.iter().enumerate() {
        if a.len() > MAX_ARG_BYTES {
            return Err(over(
                format!("{field} (argument {})", i + 1),
                format!("{} bytes", a.len()),
                format!("{MAX_ARG_BYTES} {per_arg}"),
            ));
        }
        total += a.len() + 1;
    }
    for (k, v) in env {
        // `NAME=VALUE` and its NUL.
        let len = k.len() + v.len() + 1;
        if len > MAX_ARG_BYTES {
            return Err(over(
                format!("environment ({k})"),
                format!("{len} bytes"),
                format!("{MAX_ARG_BYTES} {per_arg}"),
            ));
        }
        total += len + 1;
    }
    if total > MAX_COMMAND_LINE_BYTES {
        return Err(over(
            format!("{field} and environment"),
            format!("{total} bytes"),
            format!(
                "{MAX_COMMAND_LINE_BYTES} bytes in all (Linux's ARG_MAX is commonly 2 MiB, shared with the local RM's environment)"
            ),
        ));
    }
    Ok(())
}

/// An executable reference: its name, hash and size.
pub fn check_executable(field: &str, e: &ExecutableRef) -> Result<(), LimitError> {
    check_len(&format!("{field} name"), &e.name, MAX_NAME_BYTES)?;
    // A SHA-256 is 64 hex digits; anything longer is no hash.
    check_len(&format!("{field} sha256"), &e.sha256, 64)?;
    if e.size > MAX_EXECUTABLE_BYTES {
        return Err(over(
            format!("{field} size"),
            format!("{} bytes", e.size),
            format!("{MAX_EXECUTABLE_BYTES} bytes (255 MiB)"),
        ));
    }
    Ok(())
}

/// Every limit of a parsed (or received) job description; every value above
/// its limit is reported, in field order.
pub fn check_spec(spec: &JobSpec) -> Vec<LimitError> {
    let mut out = Vec::new();
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
    push(check_len("executable", &spec.executable, MAX_PATH_BYTES));
    push(check_command_line(
        "arguments",
        &spec.arguments,
        &spec.environment,
    ));
    for (key, path) in [("output", &spec.output), ("error", &spec.error)] {
        if let Some(p) = path {
            push(check_len(key, p, MAX_PATH_BYTES));
        }
    }
    push(check_count(
        "transfer_input_files",
        spec.transfer_input_files.len(),
        MAX_INPUT_FILES,
        "files",
    ));
    for f in spec.transfer_input_files.iter().take(MAX_INPUT_FILES) {
        push(check_len("transfer_input_files", f, MAX_PATH_BYTES));
    }
    push(check_count(
        "transfer_input_files (uploaded)",
        spec.input_refs.len(),
        MAX_INPUT_FILES,
        "files",
    ));
    for r in spec.input_refs.iter().take(MAX_INPUT_FILES) {
        push(check_executable("transfer_input_files", r));
    }
    let input_bytes: u64 = spec
        .input_refs
        .iter()
        .take(MAX_INPUT_FILES)
        .map(|r| r.size.min(MAX_INPUT_BYTES + 1))
        .sum();
    if input_bytes > MAX_INPUT_BYTES {
        push(Err(over(
            "transfer_input_files (together)",
            format!("{input_bytes} bytes"),
            format!("{MAX_INPUT_BYTES} bytes (256 MiB)"),
        )));
    }
    push(check_count(
        "queue",
        spec.classes.len(),
        MAX_CLASSES_PER_JOB,
        "classes",
    ));
    push(check_count(
        "job attributes",
        spec.attributes.len(),
        MAX_JOB_ATTRIBUTES,
        "attributes",
    ));
    for (name, text) in spec.attributes.iter().take(MAX_JOB_ATTRIBUTES) {
        push(check_len("job attribute name", name, MAX_NAME_BYTES));
        push(check_len("job attribute value", text, MAX_EXPRESSION_BYTES));
    }
    for (key, path) in [("log", &spec.log), ("initialdir", &spec.initial_dir)] {
        if let Some(p) = path {
            push(check_len(key, p, MAX_PATH_BYTES));
        }
    }
    push(check_count(
        "transfer_output_files",
        spec.transfer_output_files.len(),
        MAX_RETURNED_FILES - 2,
        "files",
    ));
    for f in spec.transfer_output_files.iter().take(MAX_RETURNED_FILES) {
        push(check_len("transfer_output_files", f, MAX_PATH_BYTES));
    }
    if let Some(e) = &spec.master_requirements {
        push(check_len("master_requirements", e, MAX_EXPRESSION_BYTES));
    }
    if !(1..=MAX_JOBS_PER_SUBMIT).contains(&spec.count) {
        push(Err(LimitError {
            field: "queue".into(),
            value: spec.count.to_string(),
            limit: format!("1 to {MAX_JOBS_PER_SUBMIT} copies of a job"),
        }));
    }
    let (mut minimum, mut class_over) = (0u64, false);
    for c in spec.classes.iter().take(MAX_CLASSES_PER_JOB) {
        let name = if c.name.len() > MAX_NAME_BYTES {
            push(check_len("class_name", &c.name, MAX_NAME_BYTES));
            "?"
        } else {
            c.name.as_str()
        };
        push(check_len(
            &format!("class `{name}`: requirements"),
            &c.requirements,
            MAX_EXPRESSION_BYTES,
        ));
        if let Some(rank) = &c.rank {
            push(check_len(
                &format!("class `{name}`: rank"),
                rank,
                MAX_EXPRESSION_BYTES,
            ));
        }
        let field = format!("class `{name}`: machine_count");
        let count = check_machine_count(&field, c.min.max(c.max));
        class_over |= count.is_err();
        push(count);
        minimum += u64::from(c.min);
    }
    // The sum says nothing more when one class is over its own limit.
    if minimum > MAX_MINIMUM_PER_JOB && !class_over {
        out.push(over(
            "machine_count (minimums of all classes)",
            minimum,
            format!("{MAX_MINIMUM_PER_JOB} machines per job"),
        ));
    }
    out.extend(check_expressions_of_job(&spec.classes).err());
    out
}

/// The requirements and ranks of all of a job's classes together are at most
/// [`MAX_EXPRESSION_BYTES_PER_JOB`].
pub fn check_expressions_of_job(classes: &[crate::submit::ClassSpec]) -> Result<(), LimitError> {
    let total: usize = classes
        .iter()
        .map(|c| c.requirements.len() + c.rank.as_ref().map_or(0, String::len))
        .sum();
    if total > MAX_EXPRESSION_BYTES_PER_JOB {
        return Err(over(
            "requirements and rank of all classes",
            format!("{total} bytes"),
            format!("{MAX_EXPRESSION_BYTES_PER_JOB} bytes per job"),
        ));
    }
    Ok(())
}

fn refuse(errors: Vec<LimitError>) -> Result<(), Failure> {
    if errors.is_empty() {
        return Ok(());
    }
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Err(Failure {
        code: FailureCode::Invalid,
        message,
    })
}

/// Every limit of a `carmi submit` request, as the global RM checks it.
pub fn check_submit(req: &SubmitRequest) -> Result<(), Failure> {
    let mut errors = Vec::new();
    errors.extend(check_len("owner", &req.owner, MAX_NAME_BYTES).err());
    errors.extend(check_len("machine", &req.machine, MAX_NAME_BYTES).err());
    errors.extend(check_executable("executable", &req.executable).err());
    errors.extend(check_spec(&req.spec));
    refuse(errors)
}

fn check_hosts(field: &str, n: usize) -> Result<(), LimitError> {
    check_count(field, n, MAX_HOSTS_PER_REQUEST, "hosts")
}

/// Every limit of an application request, as the global RM checks it.
pub fn check_request(req: &Request) -> Result<(), Failure> {
    let class = |f: &str, name: &str| check_len(f, name, MAX_NAME_BYTES);
    let expr = |f: &str, e: &str| check_len(f, e, MAX_EXPRESSION_BYTES);
    let r = match req {
        Request::CancelRequest { .. }
        | Request::Config
        | Request::GetHostInfo { .. }
        | Request::ProcessInfo { .. }
        | Request::Processes
        | Request::GetClassDefinitions
        | Request::LookupProcess { .. } => Ok(()),
        Request::AddHosts {
            class: c,
            count,
            increment,
        } => class("AddHosts class", c)
            .and_then(|()| check_machine_count("AddHosts count", *count))
            .and_then(|()| check_machine_count("AddHosts increment", *increment)),
        Request::DelHosts { hosts } => check_hosts("DelHosts hosts", hosts.len()),
        Request::AddNotify { class: c } => class("AddNotify class", c),
        Request::DeleteNotify { hosts } => check_hosts("DeleteNotify hosts", hosts.len()),
        Request::SuspendNotify { hosts } => check_hosts("SuspendNotify hosts", hosts.len()),
        Request::ResumeNotify { hosts } => check_hosts("ResumeNotify hosts", hosts.len()),
        Request::ClassSpawn {
            executable,
            args,
            target,
            ..
        } => check_executable("ClassSpawn executable", executable)
            .and_then(|()| check_command_line("ClassSpawn args", args, &[]))
            .and_then(|()| match target {
                crate::msg::SpawnTarget::Class(c) => class("ClassSpawn class", c),
                crate::msg::SpawnTarget::Host(_) => Ok(()),
            }),
        Request::DefineClass {
            name,
            expression,
            rank,
            ..
        } => class("DefineClass name", name)
            .and_then(|()| expr("DefineClass expression", expression))
            .and_then(|()| {
                rank.as_deref()
                    .map_or(Ok(()), |r| expr("DefineClass rank", r))
            }),
        Request::ExcludeHosts { class: c, hosts } => class("ExcludeHosts class", c)
            .and_then(|()| check_hosts("ExcludeHosts hosts", hosts.len())),
        Request::RemoveClass { name } => class("RemoveClass name", name),
    };
    refuse(r.err().into_iter().collect())
}

/// A job or process id chosen by a client is at most [`MAX_ID`].
pub fn check_id(field: &str, id: u64) -> Result<(), LimitError> {
    if id > MAX_ID {
        return Err(over(field, id, format!("{MAX_ID} (2^53)")));
    }
    Ok(())
}

/// `reason` cut to [`MAX_REASON_BYTES`] (on a character boundary), marked when cut.
pub fn cut_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &reason[..end], reason.len())
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;

/// Most bytes of a master's output one `carmi logs` answer carries: the
/// local RM reads no more per request, so that a large log costs several
/// small frames rather than one large one.
pub const MAX_LOG_CHUNK_BYTES: u64 = 1 << 20;
