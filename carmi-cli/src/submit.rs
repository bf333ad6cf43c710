//! `carmi submit`: a submit file read and checked here into one cluster of
//! procs (macros expanded with this machine's environment, item files and
//! commands; paths made absolute; the executable and input files read), then
//! sent as one submit: proc 0 and the others beside it, the files uploaded
//! with it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use carmi_api::admin::request_with_payload;
use carmi_api::handshake::Secret;
use carmi_api::msg::{ExecutableRef, FromGlobal, SubmitRequest, ToGlobal};
use carmi_api::submit::{ClusterSpec, JobSpec};
use clap::Args;

use crate::config::PoolArgs;

mod machine_env;
use crate::jobs::user_name;
use crate::talk::{connect, failed, print};

/// `carmi submit` options.
#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The submit file.
    file: PathBuf,
    /// Pin the master to this machine [env: CARMI_MACHINE]; else it runs on
    /// this machine if it is in the pool, else where the global RM places it
    /// (on a machine matching `master_requirements`), and its output comes
    /// back with `carmi wait` or `carmi fetch`
    #[arg(long, value_name = "NAME")]
    machine: Option<String>,
    /// Print {"job": C, "cluster": C, "procs": N, "jobs": [...]} instead of the cluster id alone
    #[arg(long)]
    json: bool,
    /// Print the procs' ids as `C.0 - C.N-1` (or -terse)
    #[arg(long)]
    terse: bool,
    /// Print the job ads it would queue and queue nothing (or -dry-run)
    #[arg(long)]
    dry_run: bool,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().split('.').next().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Runs `carmi submit`.
pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let display = args.file.display().to_string();
    let base = args
        .file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let env = machine_env::MachineEnv::new(base.clone());
    let cluster = read_cluster(&args.file, &display, &env)?;
    let ClusterSpec {
        mut procs,
        max_materialize,
        max_idle,
    } = cluster;
    for p in &mut procs {
        resolve_paths(p, &args.file, &display)?;
    }
    if let Some(other) = procs.iter().find(|p| p.executable != procs[0].executable) {
        anyhow::bail!(
            "{display}: the procs name two executables ({} and {}); a cluster runs one: submit each with its own file",
            procs[0].executable,
            other.executable
        );
    }
    warn_about_mail(&procs);
    let pinned = args.machine.clone().or_else(|| {
        std::env::var("CARMI_MACHINE")
            .ok()
            .filter(|m| !m.is_empty())
    });
    let anywhere = pinned.is_none();
    // A master the global RM may place on another machine gets its input
    // files by content, through the pool, as it gets its executable.
    let inputs = if anywhere && !args.dry_run {
        let mut all: Vec<String> = Vec::new();
        for p in &procs {
            for f in &p.transfer_input_files {
                if !all.contains(f) {
                    all.push(f.clone());
                }
            }
        }
        read_inputs(&display, &all)?
    } else {
        Vec::new()
    };
    for p in &mut procs {
        p.input_refs = p
            .transfer_input_files
            .iter()
            .filter_map(|f| inputs.iter().find(|(_, _, path)| path == f))
            .map(|(r, _, _)| r.clone())
            .collect();
    }
    let (executable, bytes) = read_executable(&base, &procs[0], &display)?;
    let submission = Submission {
        display,
        owner: user_name(),
        machine: pinned.unwrap_or_else(host_name),
        anywhere,
        submitted_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        executable,
        bytes,
        inputs: inputs.into_iter().map(|(r, b, _)| (r, b)).collect(),
    };
    if args.dry_run {
        let s = &submission;
        return print(&crate::dryrun::job_ads(
            &procs,
            &s.owner,
            &s.machine,
            &s.executable,
        ));
    }
    let (pool, secret) = connect(&args.pool)?;
    let limits = (max_materialize, max_idle);
    let out = Output {
        json: args.json,
        terse: args.terse,
    };
    submission.queue(&pool, &secret, procs, limits, out)
}

/// HTCondor sends mail on a job's events (`notification`, `notify_user`);
/// this machine has no mail transfer agent configured for the pool, so say
/// so at submit rather than let the user wait for mail.
fn warn_about_mail(procs: &[JobSpec]) {
    let asks = procs.first().is_some_and(|p| {
        p.attributes
            .iter()
            .any(|(n, v)| (n == "JobNotification" && v.trim() != "0") || n == "NotifyUser")
    });
    if asks {
        eprintln!(
            "carmi: warning: notification/notify_user: no mail transfer agent is configured for the pool; the job's events are in its event log (`log =`) and `carmi history` instead of mail"
        );
    }
}

/// Reads and parses the submit file `file` (named `display` in errors),
/// refusing a huge one before reading it, so that it is never held in memory.
fn read_cluster(
    file: &Path,
    display: &str,
    env: &machine_env::MachineEnv,
) -> anyhow::Result<ClusterSpec> {
    if let Ok(meta) = std::fs::metadata(file)
        && meta.len() > carmi_api::limits::MAX_SUBMIT_FILE_BYTES as u64
    {
        anyhow::bail!(
            "{display}: the file: {} bytes is above the limit of {} bytes",
            meta.len(),
            carmi_api::limits::MAX_SUBMIT_FILE_BYTES
        );
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read submit file {display}"))?;
    carmi_api::submit::parse_cluster(display, &text, env).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Makes the job's file paths absolute (the master runs where the local
/// RM starts it, not here) and checks its input files are there; returns
/// the submit file's directory, where its executable is.
fn resolve_paths(spec: &mut JobSpec, file: &Path, display: &str) -> anyhow::Result<()> {
    // `job.sub` has the parent `""`, which is the current directory.
    let base = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base_abs = std::path::absolute(base)
        .with_context(|| format!("cannot resolve the directory of {display}"))?;
    // `initialdir` moves where the job's files are, not where its executable is.
    let io_base = match &spec.initial_dir {
        Some(d) => base_abs.join(d),
        None => base_abs.clone(),
    };
    if !io_base.is_dir() {
        anyhow::bail!(
            "{display}: initialdir: {} is not a directory",
            io_base.display()
        );
    }
    let abs = |p: &str| io_base.join(p).to_string_lossy().into_owned();
    spec.output = spec.output.as_deref().map(abs);
    spec.error = spec.error.as_deref().map(abs);
    spec.log = spec.log.as_deref().map(abs);
    spec.initial_dir = Some(io_base.to_string_lossy().into_owned());
    // The proxy travels as an input file (below); its attribute names it
    // where it is, as HTCondor's does.
    for (name, value) in &mut spec.attributes {
        if name == "X509UserProxy" {
            let path = abs(value.trim_matches('"'));
            *value = format!("{path:?}");
        }
    }
    for f in &mut spec.transfer_input_files {
        let path = abs(f);
        if !Path::new(&path).is_file() {
            anyhow::bail!("{display}: transfer_input_files: {path} is not a readable file");
        }
        *f = path;
    }
    Ok(())
}

/// The job's executable (relative to `base`, the submit file's directory)
/// as the global RM names it, and its content to upload.
fn read_executable(
    base: &Path,
    spec: &JobSpec,
    display: &str,
) -> anyhow::Result<(ExecutableRef, Vec<u8>)> {
    let exe_path = base.join(&spec.executable);
    let bytes = std::fs::read(&exe_path).with_context(|| {
        format!(
            "{display}: executable {} cannot be read",
            exe_path.display()
        )
    })?;
    let executable = ExecutableRef {
        name: Path::new(&spec.executable)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.executable.clone()),
        sha256: carmi_api::exe::sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    Ok((executable, bytes))
}

/// An input file read for upload: its reference, content and path.
type Input = (ExecutableRef, Vec<u8>, String);

/// Reads `transfer_input_files` (absolute paths) for upload, within
/// [`carmi_api::limits::MAX_INPUT_BYTES`] together (checked before reading).
fn read_inputs(display: &str, paths: &[String]) -> anyhow::Result<Vec<Input>> {
    let limit = carmi_api::limits::MAX_INPUT_BYTES;
    let mut total = 0u64;
    for p in paths {
        total += std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    }
    if total > limit {
        anyhow::bail!(
            "{display}: transfer_input_files: {total} bytes together, above the limit of {limit} bytes (256 MiB) for files sent through the pool; put large data on a shared file system, or pin the master with --machine"
        );
    }
    paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p)
                .with_context(|| format!("{display}: transfer_input_files: cannot read {p}"))?;
            let name = Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.clone());
            let r = ExecutableRef {
                name,
                sha256: carmi_api::exe::sha256_hex(&bytes),
                size: bytes.len() as u64,
            };
            Ok((r, bytes, p.clone()))
        })
        .collect()
}

/// What every copy of a submitted job shares, and the files that travel
/// with the first.
struct Submission {
    /// The submit file, as errors name it.
    display: String,
    owner: String,
    machine: String,
    /// No machine was pinned: the global RM places the master.
    anywhere: bool,
    submitted_unix: u64,
    executable: ExecutableRef,
    bytes: Vec<u8>,
    inputs: Vec<(ExecutableRef, Vec<u8>)>,
}

/// How the submitted cluster is printed.
#[derive(Clone, Copy)]
struct Output {
    json: bool,
    terse: bool,
}

impl Submission {
    /// Submits the cluster in one request and prints its id; the procs'
    /// event logs get their `submitted` lines.
    fn queue(
        &self,
        pool: &str,
        secret: &Secret,
        mut procs: Vec<JobSpec>,
        (max_materialize, max_idle): (Option<u32>, Option<u32>),
        out: Output,
    ) -> anyhow::Result<()> {
        let display = &self.display;
        let logs: Vec<bool> = procs.iter().map(|p| p.log.is_some()).collect();
        let first = procs.remove(0);
        let msg = ToGlobal::Submit(Box::new(SubmitRequest {
            owner: self.owner.clone(),
            machine: self.machine.clone(),
            executable: self.executable.clone(),
            spec: first,
            submitted_unix: self.submitted_unix,
            anywhere: self.anywhere,
            procs,
            max_materialize,
            max_idle,
        }));
        let uploads: Vec<(&ExecutableRef, &[u8])> =
            std::iter::once((&self.executable, self.bytes.as_slice()))
                .chain(self.inputs.iter().map(|(r, b)| (r, b.as_slice())))
                .collect();
        let answer = crate::block_on(async {
            Ok(request_with_payload(pool, secret, &uploads, msg).await?.0)
        })?;
        let FromGlobal::Submitted { job } = answer else {
            return Err(failed(answer, &format!("submit of {display}")));
        };
        let cluster = job.0;
        let logged: Vec<carmi_api::ids::JobId> = logs
            .iter()
            .enumerate()
            .filter(|(_, l)| **l)
            .map(|(p, _)| carmi_api::ids::JobId(cluster + p as u64))
            .collect();
        crate::block_on(async {
            crate::events::write_logs(pool, secret, &logged).await;
            Ok(())
        })?;
        let n = logs.len();
        if n > 1 && !out.json && !out.terse {
            eprintln!("{n} job(s) submitted to cluster {cluster}.");
        }
        print(&ids_text(cluster, n, out))
    }
}

/// What `carmi submit` prints for cluster `cluster` of `n` procs.
fn ids_text(cluster: u64, n: usize, out: Output) -> String {
    if out.json {
        let jobs: Vec<u64> = (0..n as u64).map(|p| cluster + p).collect();
        let v = serde_json::json!({ "job": cluster, "cluster": cluster, "procs": n, "jobs": jobs });
        format!("{v}\n")
    } else if out.terse {
        format!("{cluster}.0 - {cluster}.{}\n", n.saturating_sub(1))
    } else {
        format!("{cluster}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_printed_as_htcondor_prints_it() {
        let plain = Output {
            json: false,
            terse: false,
        };
        assert_eq!(ids_text(12, 1, plain), "12\n");
        assert_eq!(ids_text(12, 3, plain), "12\n");
        let terse = Output {
            json: false,
            terse: true,
        };
        assert_eq!(ids_text(12, 3, terse), "12.0 - 12.2\n");
        let json = Output {
            json: true,
            terse: false,
        };
        let v: serde_json::Value = serde_json::from_str(&ids_text(12, 3, json)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"job": 12, "cluster": 12, "procs": 3, "jobs": [12, 13, 14]})
        );
    }
}
