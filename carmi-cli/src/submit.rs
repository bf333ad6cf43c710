//! `carmi submit`: a submit file read and checked here (paths made absolute,
//! the executable and input files read), then one submit per copy of its
//! `queue N`, the files uploaded with the first.

use std::path::{Path, PathBuf};

use anyhow::Context;
use carmi_api::admin::request_with_payload;
use carmi_api::handshake::Secret;
use carmi_api::msg::{ExecutableRef, FromGlobal, SubmitRequest, ToGlobal};
use carmi_api::submit::JobSpec;
use clap::Args;

use crate::config::PoolArgs;
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
    /// Print {"job": N} instead of the job id alone
    #[arg(long)]
    json: bool,
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
    let mut spec = read_spec(&args.file, &display)?;
    let base = resolve_paths(&mut spec, &args.file, &display)?;
    let pinned = args.machine.clone().or_else(|| {
        std::env::var("CARMI_MACHINE")
            .ok()
            .filter(|m| !m.is_empty())
    });
    let anywhere = pinned.is_none();
    // A master the global RM may place on another machine gets its input
    // files by content, through the pool, as it gets its executable.
    let inputs = if anywhere && !args.dry_run {
        read_inputs(&display, &spec.transfer_input_files)?
    } else {
        Vec::new()
    };
    spec.input_refs = inputs.iter().map(|(r, _)| r.clone()).collect();
    let (executable, bytes) = read_executable(base, &spec, &display)?;
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
        inputs,
    };
    let copies: Vec<_> = (0..spec.count as usize).map(|p| spec.copy(p)).collect();
    if args.dry_run {
        let s = &submission;
        return print(&crate::dryrun::job_ads(
            &copies,
            &s.owner,
            &s.machine,
            &s.executable,
        ));
    }
    let (pool, secret) = connect(&args.pool)?;
    submission.queue(&pool, &secret, copies, args.json)
}

/// Reads and parses the submit file `file` (named `display` in errors),
/// refusing a huge one before reading it, so that it is never held in memory.
fn read_spec(file: &Path, display: &str) -> anyhow::Result<JobSpec> {
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
    carmi_api::submit::parse(display, &text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Makes the job's file paths absolute (the master runs where the local
/// RM starts it, not here) and checks its input files are there; returns
/// the submit file's directory, where its executable is.
fn resolve_paths<'a>(
    spec: &mut JobSpec,
    file: &'a Path,
    display: &str,
) -> anyhow::Result<&'a Path> {
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
    for f in &mut spec.transfer_input_files {
        let path = abs(f);
        if !Path::new(&path).is_file() {
            anyhow::bail!("{display}: transfer_input_files: {path} is not a readable file");
        }
        *f = path;
    }
    Ok(base)
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

/// Reads `transfer_input_files` (absolute paths) for upload, within
/// [`carmi_api::limits::MAX_INPUT_BYTES`] together (checked before reading).
fn read_inputs(display: &str, paths: &[String]) -> anyhow::Result<Vec<(ExecutableRef, Vec<u8>)>> {
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
            Ok((r, bytes))
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

impl Submission {
    /// Submits each of `copies` in turn and prints the queued job ids; a
    /// refusal after some were queued prints theirs before the error.
    fn queue(
        &self,
        pool: &str,
        secret: &Secret,
        copies: Vec<JobSpec>,
        json: bool,
    ) -> anyhow::Result<()> {
        let display = &self.display;
        let mut jobs = Vec::new();
        // Jobs with a `log =`: their `submitted` line is written once all are queued.
        let mut logged = Vec::new();
        for (i, copy) in copies.into_iter().enumerate() {
            let copy_log = copy.log.clone();
            let msg = self.request(copy);
            let uploads = self.uploads(i);
            let answer = crate::block_on(async {
                Ok(request_with_payload(pool, secret, &uploads, msg).await?.0)
            })?;
            match answer {
                FromGlobal::Submitted { job } => {
                    jobs.push(job.0);
                    if copy_log.is_some() {
                        logged.push(job);
                    }
                }
                other if jobs.is_empty() => {
                    return Err(failed(other, &format!("submit of {display}")));
                }
                other => {
                    print(&ids_text(&jobs, json))?;
                    return Err(failed(
                        other,
                        &format!("submit of {display}, copy {i} (copies before it were queued)"),
                    ));
                }
            }
        }
        crate::block_on(async {
            crate::events::write_logs(pool, secret, &logged).await;
            Ok(())
        })?;
        print(&ids_text(&jobs, json))
    }

    /// The submit of one copy.
    fn request(&self, copy: JobSpec) -> ToGlobal {
        ToGlobal::Submit(Box::new(SubmitRequest {
            owner: self.owner.clone(),
            machine: self.machine.clone(),
            executable: self.executable.clone(),
            spec: copy,
            submitted_unix: self.submitted_unix,
            anywhere: self.anywhere,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }))
    }

    /// What copy `i` uploads: the files travel once, with the first; the
    /// global RM keeps them for the copies.
    fn uploads(&self, i: usize) -> Vec<(&ExecutableRef, &[u8])> {
        if i == 0 {
            std::iter::once((&self.executable, self.bytes.as_slice()))
                .chain(self.inputs.iter().map(|(r, b)| (r, b.as_slice())))
                .collect()
        } else {
            Vec::new()
        }
    }
}

/// The queued job ids: one a line, or `{"job": FIRST, "jobs": [...]}`.
fn ids_text(jobs: &[u64], json: bool) -> String {
    if json {
        let first = jobs.first().copied().unwrap_or_default();
        format!("{}\n", serde_json::json!({ "job": first, "jobs": jobs }))
    } else {
        jobs.iter().map(|j| format!("{j}\n")).collect()
    }
}
