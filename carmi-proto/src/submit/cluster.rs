//! A submit file read whole into a cluster of procs, in one of two modes.
//!
//! - A file with CARMI's class keys (`class_name`, `machine_count`) keeps
//!   their meaning: each `queue` closes a resource class of one job; a
//!   `queue N` with one class makes N procs of it.
//! - Any other file is read as HTCondor reads it: each `queue` statement
//!   makes procs with the values set before it, each proc a job of one class
//!   (`class0`, one machine) whose requirements are the `requirements` in
//!   effect at that statement.
//!
//! Either way values are expanded late (at each `queue`, see
//! [`super::macros`]), and what needs the world (environment, item files,
//! commands, directories, the clock) is asked of a [`SubmitEnv`].

use std::collections::HashMap;

use super::commands;
use super::env::{FixedEnv, SubmitEnv};
use super::lang::{self, Stmt};
use super::macros::{ProcVars, Scope};
use super::parser::Parser;
use super::queue;
use super::{JobSpec, SubmitError, SubmitErrors};
use crate::bounds as limits;

/// What one submit file describes: one cluster of procs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Proc 0, 1, ...: each a job, macros of its proc expanded and
    /// `$(ClusterId)` left for the global RM.
    pub procs: Vec<JobSpec>,
    /// `max_materialize`: procs in the queue at once at most.
    pub max_materialize: Option<u32>,
    /// `max_idle`: procs waiting for machines at once at most.
    pub max_idle: Option<u32>,
}

fn one_error(file: &str, line: usize, reason: String) -> SubmitErrors {
    SubmitErrors(vec![SubmitError {
        file: file.to_string(),
        line,
        reason,
    }])
}

/// Parses a submit file into its cluster. `file` names it in messages; `env`
/// answers what the file asks of the world. On any mistake every mistake
/// found (of the first proc that has some) is returned.
pub fn parse_cluster(
    file: &str,
    text: &str,
    env: &dyn SubmitEnv,
) -> Result<ClusterSpec, SubmitErrors> {
    if let Err(e) = limits::check_len("the file", text, limits::MAX_SUBMIT_FILE_BYTES) {
        return Err(one_error(file, 0, e.to_string()));
    }
    let stmts = lang::statements(text);
    let last_line = text.lines().count();
    let carmi = stmts.iter().any(|s| {
        matches!(s, Stmt::Set { key, .. }
            if matches!(commands::canonical(key).as_str(), "class_name" | "machine_count"))
    });
    let mut procs = if carmi {
        carmi_mode(file, &stmts, env, last_line)?
    } else {
        condor_mode(file, &stmts, env, last_line)?
    };
    for p in &mut procs {
        finish_proc(p, env).map_err(|e| one_error(file, 0, e))?;
    }
    let attr = |name: &str| {
        procs
            .last()
            .and_then(|p| p.attributes.iter().find(|(n, _)| n == name))
            .and_then(|(_, v)| v.parse::<u32>().ok())
    };
    Ok(ClusterSpec {
        max_materialize: attr("JobMaterializeLimit"),
        max_idle: attr("JobMaterializeMaxIdle"),
        procs,
    })
}

/// Parses a submit file read with no outside world (no environment, files
/// or commands): proc 0 of its cluster, with `count` the number of procs.
pub fn parse(file: &str, text: &str) -> Result<JobSpec, SubmitErrors> {
    let c = parse_cluster(file, text, &FixedEnv::default())?;
    let n = c.procs.len() as u32;
    let mut first = c
        .procs
        .into_iter()
        .next()
        .ok_or_else(|| one_error(file, 0, "the file queues no procs".into()))?;
    first.count = n;
    Ok(first)
}

/// A CARMI file: one job whose classes the `queue`s close, in copies.
fn carmi_mode(
    file: &str,
    stmts: &[Stmt],
    env: &dyn SubmitEnv,
    last_line: usize,
) -> Result<Vec<JobSpec>, SubmitErrors> {
    let mut p = Parser::new(file);
    let mut user: HashMap<String, String> = HashMap::new();
    let mut pending: Vec<(usize, &str, &str)> = Vec::new();
    let flush =
        |p: &mut Parser, user: &HashMap<String, String>, pending: &mut Vec<(usize, &str, &str)>| {
            let scope = Scope {
                user,
                proc: None,
                env,
            };
            for (line, key, value) in pending.drain(..) {
                match scope.expand(value) {
                    Ok(v) => p.line(line, &format!("{key} = {v}")),
                    Err(e) => p.err(line, format!("{key}: {e}")),
                }
            }
        };
    for s in stmts {
        match s {
            Stmt::Set { line, key, value } => {
                user.insert(key.to_ascii_lowercase(), value.clone());
                if commands::lookup(key).is_some() {
                    pending.push((*line, key, value));
                }
            }
            Stmt::Queue { line, args, .. } => {
                flush(&mut p, &user, &mut pending);
                p.line(*line, &format!("queue {args}"));
            }
            Stmt::Other { line, text } => p.err(*line, other_reason(text)),
        }
    }
    flush(&mut p, &user, &mut pending);
    let spec = p.finish(last_line)?;
    Ok((0..spec.count as usize).map(|i| spec.copy(i)).collect())
}

/// Why a line that is neither `key = value` nor `queue` is refused.
fn other_reason(text: &str) -> String {
    let first = text
        .split(|c: char| c.is_whitespace() || c == ':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    match first.as_str() {
        "include" => "`include` is not read here: put the commands in this file".into(),
        "if" | "elif" | "else" | "endif" | "error" | "warning" => format!(
            "`{first}`: conditionals of the submit language are not read here; write the values the job needs"
        ),
        _ if text.contains("@=") => {
            "`@=` multi-line values are not read here: write the value on one line (or continue it with `\\`)".into()
        }
        _ => format!("`{text}` is neither `key = value`, a comment nor `queue`"),
    }
}

/// The settings in effect: `(canonical name, key as written, value, line)`.
type Settings = Vec<(String, String, String, usize)>;

/// An HTCondor file: each `queue` statement makes procs.
fn condor_mode(
    file: &str,
    stmts: &[Stmt],
    env: &dyn SubmitEnv,
    last_line: usize,
) -> Result<Vec<JobSpec>, SubmitErrors> {
    let mut user: HashMap<String, String> = HashMap::new();
    let mut settings: Settings = Vec::new();
    let mut procs: Vec<JobSpec> = Vec::new();
    let mut queued = false;
    // The previous proc's expanded settings and spec, reused when a proc's
    // settings come out the same (a plain `queue 2395`).
    let mut last: Option<(Vec<String>, JobSpec)> = None;
    for s in stmts {
        match s {
            Stmt::Set { line, key, value } => {
                user.insert(key.to_ascii_lowercase(), value.clone());
                if commands::lookup(key).is_some() {
                    let canon = commands::canonical(key);
                    settings.retain(|(c, ..)| *c != canon);
                    settings.push((canon, key.clone(), value.clone(), *line));
                }
            }
            Stmt::Other { line, text } => {
                return Err(one_error(file, *line, other_reason(text)));
            }
            Stmt::Queue { line, args, body } => {
                queued = true;
                let scope = Scope {
                    user: &user,
                    proc: None,
                    env,
                };
                let q = scope
                    .expand(args)
                    .and_then(|a| queue::parse(&a, body.as_deref()))
                    .map_err(|e| one_error(file, *line, e))?;
                let items = queue::items(&q, env).map_err(|e| one_error(file, *line, e))?;
                let total = procs.len() + items.len().saturating_mul(q.count);
                if total > limits::MAX_JOBS_PER_SUBMIT as usize {
                    return Err(one_error(
                        file,
                        *line,
                        format!(
                            "queue: {total} procs; at most {} per submit file",
                            limits::MAX_JOBS_PER_SUBMIT
                        ),
                    ));
                }
                for (item_index, item) in items.into_iter().enumerate() {
                    for step in 0..q.count {
                        let vars = ProcVars {
                            proc_id: procs.len(),
                            step,
                            item_index,
                            vars: item.clone(),
                        };
                        let scope = Scope {
                            user: &user,
                            proc: Some(&vars),
                            env,
                        };
                        let spec = one_proc(file, &settings, &scope, *line, last_line, &mut last)?;
                        procs.push(spec);
                    }
                }
            }
        }
    }
    if !queued {
        return Err(one_error(
            file,
            last_line.max(1),
            "no `queue`: a submit file ends with `queue` (or `queue N`, `queue ... in/from/matching ...`)".into(),
        ));
    }
    Ok(procs)
}

/// One proc: the settings expanded with its variables, then checked.
fn one_proc(
    file: &str,
    settings: &Settings,
    scope: &Scope,
    queue_line: usize,
    last_line: usize,
    last: &mut Option<(Vec<String>, JobSpec)>,
) -> Result<JobSpec, SubmitErrors> {
    let mut lines = Vec::with_capacity(settings.len());
    let mut errors = Vec::new();
    for (_, key, value, line) in settings {
        match scope.expand(value) {
            Ok(v) => lines.push(format!("{key} = {v}")),
            Err(e) => errors.push(SubmitError {
                file: file.to_string(),
                line: *line,
                reason: format!("{key}: {e}"),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(SubmitErrors(errors));
    }
    if let Some((prev, spec)) = last.as_ref()
        && *prev == lines
    {
        return Ok(spec.clone());
    }
    let mut p = Parser::new(file);
    for (l, (_, _, _, line)) in lines.iter().zip(settings) {
        p.line(*line, l);
    }
    p.line(queue_line, "queue");
    let spec = p.finish(last_line)?;
    *last = Some((lines, spec.clone()));
    Ok(spec)
}

/// What a proc takes from the world once checked: `getenv`'s variables,
/// the accounting group's user, the proxy file of `x509userproxy`.
fn finish_proc(p: &mut JobSpec, env: &dyn SubmitEnv) -> Result<(), String> {
    let get = |p: &JobSpec, name: &str| {
        p.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim_matches('"').to_string())
    };
    if let Some(g) = get(p, "GetEnv") {
        let mut vars = getenv(&g, env);
        vars.retain(|(k, _)| !p.environment.iter().any(|(n, _)| n == k));
        vars.append(&mut p.environment);
        p.environment = vars;
    }
    // HTCondor runs a nice user's jobs in the group `nice-user`.
    if get(p, "NiceUser").as_deref() == Some("true") && get(p, "AcctGroup").is_none() {
        p.attributes
            .push(("AcctGroup".into(), format!("{:?}", "nice-user")));
    }
    if let Some(group) = get(p, "AcctGroup") {
        let user = get(p, "AcctGroupUser").unwrap_or_else(|| env.user());
        let set = |p: &mut JobSpec, n: &str, v: String| {
            p.attributes.retain(|(a, _)| a != n);
            p.attributes.push((n.to_string(), format!("{v:?}")));
        };
        set(p, "AcctGroupUser", user.clone());
        set(p, "AccountingGroup", format!("{group}.{user}"));
    }
    gpu_constraints(p);
    if let Some(proxy) = get(p, "X509UserProxy") {
        if !env.is_file(&proxy) {
            return Err(format!(
                "x509userproxy: {proxy} is not a readable file; give the path of your proxy (voms-proxy-init writes /tmp/x509up_u$(id -u))"
            ));
        }
        if !p.transfer_input_files.contains(&proxy) {
            p.transfer_input_files.push(proxy);
        }
    }
    check_limits(p).map_err(|e| e.to_string())
}

/// What the world added (`getenv`'s variables, the proxy) and the attributes
/// of every command together, against the limits the global RM checks, so
/// that a file accepted here is never refused there for a limit.
fn check_limits(p: &JobSpec) -> Result<(), limits::LimitError> {
    limits::check_command_line("arguments", &p.arguments, &p.environment)?;
    limits::check_count(
        "transfer_input_files",
        p.transfer_input_files.len(),
        limits::MAX_INPUT_FILES,
        "files",
    )?;
    limits::check_count(
        "job attributes",
        p.attributes.len(),
        limits::MAX_JOB_ATTRIBUTES,
        "attributes",
    )?;
    for (name, value) in &p.attributes {
        limits::check_len("job attribute name", name, limits::MAX_NAME_BYTES)?;
        limits::check_len(name, value, limits::MAX_EXPRESSION_BYTES)?;
    }
    Ok(())
}

/// HTCondor's GPU constraints, as it writes them: `RequireGPUs` is
/// `require_gpus` (else `Capability >= GPUsMinCapability` when a minimum
/// capability is given), and `GlobalMemoryMb >= GPUsMinMemory` when a
/// minimum memory is; all of them only for a job that requests GPUs.
fn gpu_constraints(p: &mut JobSpec) {
    let has = |p: &JobSpec, n: &str| p.attributes.iter().any(|(a, _)| a == n);
    let gpu_attrs = ["RequireGPUs", "GPUsMinCapability", "GPUsMinMemory"];
    if !has(p, "RequestGPUs") {
        p.attributes
            .retain(|(a, _)| !gpu_attrs.contains(&a.as_str()));
        return;
    }
    let mut terms: Vec<String> = Vec::new();
    if let Some((_, r)) = p.attributes.iter().find(|(a, _)| a == "RequireGPUs") {
        terms.push(r.clone());
    } else if has(p, "GPUsMinCapability") {
        terms.push("Capability >= GPUsMinCapability".into());
    }
    if has(p, "GPUsMinMemory") {
        terms.push("GlobalMemoryMb >= GPUsMinMemory".into());
    }
    p.attributes.retain(|(a, _)| a != "RequireGPUs");
    if !terms.is_empty() {
        p.attributes
            .push(("RequireGPUs".into(), terms.join(" && ")));
    }
}

/// `getenv`'s variables: `true` all of them, `false` none, else a list of
/// names and patterns (`*`, `?`).
fn getenv(value: &str, env: &dyn SubmitEnv) -> Vec<(String, String)> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("false") || v.eq_ignore_ascii_case("no") {
        return Vec::new();
    }
    let all = v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes");
    let patterns: Vec<Vec<char>> = v
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().collect())
        .collect();
    env.vars()
        .into_iter()
        .filter(|(k, _)| {
            let k: Vec<char> = k.chars().collect();
            all || patterns.iter().any(|p| queue::glob(p, &k))
        })
        .collect()
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
