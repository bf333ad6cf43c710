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
//! The values and the checks of single fields are defined in a module below
//! both this one and the submit-file parser (so the parser uses them without
//! depending on the messages) and re-exported here; the checks of whole
//! messages and job descriptions are defined here.

pub use crate::bounds::*;
pub use crate::submit::check_expressions_of_job;

use crate::bounds::over;
use crate::msg::{Failure, FailureCode, Request, SubmitRequest};
use crate::submit::JobSpec;

/// Every limit of a parsed (or received) job description; every value above
/// its limit is reported, in field order.
pub fn check_spec(spec: &JobSpec) -> Vec<LimitError> {
    let mut out = Vec::new();
    check_command(spec, &mut out);
    check_input_files(spec, &mut out);
    check_job_fields(spec, &mut out);
    check_returned_files(spec, &mut out);
    check_classes(spec, &mut out);
    out.extend(check_expressions_of_job(&spec.classes).err());
    out
}

/// What the job's processes run, and where their standard output and error go.
fn check_command(spec: &JobSpec, out: &mut Vec<LimitError>) {
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
    push(check_len("executable", &spec.executable, MAX_PATH_BYTES));
    push(check_command_line(
        "arguments",
        &spec.arguments,
        &spec.environment,
    ));
    check_paths(out, [("output", &spec.output), ("error", &spec.error)]);
}

/// The job's own fields: how many classes, its attributes, its log and directory.
fn check_job_fields(spec: &JobSpec, out: &mut Vec<LimitError>) {
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
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
    check_paths(out, [("log", &spec.log), ("initialdir", &spec.initial_dir)]);
}

/// The paths given of these optional keys.
fn check_paths(out: &mut Vec<LimitError>, paths: [(&str, &Option<String>); 2]) {
    for (key, path) in paths {
        if let Some(p) = path {
            out.extend(check_len(key, p, MAX_PATH_BYTES).err());
        }
    }
}

/// The files a job's processes are given: named, and uploaded (each, and together).
fn check_input_files(spec: &JobSpec, out: &mut Vec<LimitError>) {
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
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
}

/// The files a job's processes send back: outputs and checkpoints.
fn check_returned_files(spec: &JobSpec, out: &mut Vec<LimitError>) {
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
    push(check_count(
        "transfer_output_files",
        spec.transfer_output_files.len(),
        MAX_RETURNED_FILES - 2,
        "files",
    ));
    for f in spec.transfer_output_files.iter().take(MAX_RETURNED_FILES) {
        push(check_len("transfer_output_files", f, MAX_PATH_BYTES));
    }
    // With the output files they come back in one message.
    push(check_count(
        "transfer_output_files and transfer_checkpoint_files",
        spec.transfer_output_files.len() + spec.transfer_checkpoint_files.len(),
        MAX_RETURNED_FILES - 2,
        "files",
    ));
    for f in spec
        .transfer_checkpoint_files
        .iter()
        .take(MAX_RETURNED_FILES)
    {
        push(check_len("transfer_checkpoint_files", f, MAX_PATH_BYTES));
    }
}

/// Where the job's master runs and how many copies are queued; then each
/// resource class (name, expressions, machine count) and the sum of their
/// minimums.
fn check_classes(spec: &JobSpec, out: &mut Vec<LimitError>) {
    let mut push = |r: Result<(), LimitError>| out.extend(r.err());
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
    // The cluster's other procs: as many as a submit file may queue, each
    // a job checked as proc 0 is (the first proc over a limit is named).
    if req.procs.len() >= MAX_JOBS_PER_SUBMIT as usize {
        errors.push(over(
            "procs",
            req.procs.len() + 1,
            format!("{MAX_JOBS_PER_SUBMIT} procs per submit"),
        ));
    } else if let Some((p, e)) = req
        .procs
        .iter()
        .enumerate()
        .find_map(|(i, p)| Some((i + 1, check_spec(p).into_iter().next()?)))
    {
        errors.push(LimitError {
            field: format!("proc {p}: {}", e.field),
            ..e
        });
    }
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
        Request::SetJobAttrs { attrs } => check_count(
            "SetJobAttrs attrs",
            attrs.len(),
            MAX_JOB_ATTRIBUTES,
            "attributes",
        )
        .and_then(|()| {
            attrs.iter().try_for_each(|(name, value)| {
                class("SetJobAttrs name", name).and_then(|()| expr("SetJobAttrs value", value))
            })
        }),
    };
    refuse(r.err().into_iter().collect())
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
