//! Pilots: the driver of the allocation queues (`carmi alloc`). The router
//! decides (`carmi_global_core::alloc_queue`); this module carries out its
//! [`QueueCommand`]s with a batch system behind the small [`Backend`]
//! interface (submit, cancel, status), Slurm being the first
//! ([`slurm::Slurm`]), and reports the outcomes back to the router task. The
//! batch commands run as child processes on tokio, never blocking the
//! router's loop.
//!
//! A pilot is `carmi-local` started by the batch job with the allocation's
//! CPUs as slots, a daemon token of its own (written 0600 into the queue's
//! directory under the state directory), a simulated owner that comes back
//! for good a lead time before the time limit ([`PilotSettings`]), and the
//! ad attributes `SlurmJobId`, `PilotQueue` and `PilotEndsAt`.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use carmi_api::msg::AllocQueueSpec;
use carmi_global_core::alloc_queue::{BatchState, QueueCommand};

pub mod slurm;

/// Makes a daemon token for a pilot machine lasting so many seconds (the
/// pool's token authority, given by the server), or says why it cannot.
pub type IssueToken = Arc<dyn Fn(&str, u64) -> Result<String, String> + Send + Sync>;

/// A future a backend returns.
pub type BackendFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One allocation to submit, with everything its pilots need.
#[derive(Clone, Debug)]
pub struct Order {
    /// The queue.
    pub queue: u64,
    /// The allocation.
    pub alloc: u64,
    /// The queue's settings.
    pub spec: AllocQueueSpec,
    /// The pilots' machine names, one per host.
    pub machines: Vec<String>,
    /// Their token files (same order), or none in a pool without tokens.
    pub tokens: Vec<PathBuf>,
    /// The queue's directory (scripts, tokens, batch output).
    pub dir: PathBuf,
}

/// What a batch system must offer for pilots.
pub trait Backend: Send + Sync {
    /// Submits an allocation: the batch job id, or the batch system's own
    /// message why not.
    fn submit(&self, order: Order) -> BackendFuture<Result<String, String>>;
    /// Cancels a batch job.
    fn cancel(&self, job: String) -> BackendFuture<Result<(), String>>;
    /// What the batch system says about these jobs (a job it does not
    /// know any more is [`BatchState::Gone`]).
    fn status(&self, jobs: Vec<String>)
    -> BackendFuture<Result<Vec<(String, BatchState)>, String>>;
}

/// The backend of a global RM started without pilot settings: every
/// submission fails, saying so.
pub struct Unconfigured;

impl Backend for Unconfigured {
    fn submit(&self, _: Order) -> BackendFuture<Result<String, String>> {
        Box::pin(async { Err("this global RM was started without pilot settings".into()) })
    }
    fn cancel(&self, _: String) -> BackendFuture<Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    fn status(
        &self,
        jobs: Vec<String>,
    ) -> BackendFuture<Result<Vec<(String, BatchState)>, String>> {
        Box::pin(async move {
            Ok(jobs
                .into_iter()
                .map(|j| (j, BatchState::Gone(String::new())))
                .collect())
        })
    }
}

/// How pilots are started.
#[derive(Clone, Debug)]
pub struct PilotSettings {
    /// The `carmi-local` the pilots run (default: beside this executable).
    pub local_binary: PathBuf,
    /// The pool secret file the pilots read.
    pub secret_file: PathBuf,
    /// Where pilots connect to this global RM (`HOST:PORT`); `None`: the
    /// address it listens on.
    pub global_addr: Option<String>,
}

impl PilotSettings {
    /// Pilots running the `carmi-local` beside the running executable.
    pub fn beside_this_executable(secret_file: PathBuf) -> PilotSettings {
        let local_binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("carmi-local")))
            .unwrap_or_else(|| PathBuf::from("carmi-local"));
        PilotSettings {
            local_binary,
            secret_file,
            global_addr: None,
        }
    }
}

/// What the driver reports back to the router task.
#[derive(Debug)]
pub enum PilotReport {
    /// The outcome of a submission.
    Submitted {
        /// The allocation.
        alloc: u64,
        /// The batch job id, or why not.
        result: Result<String, String>,
    },
    /// The answer to a poll.
    States(Vec<(String, BatchState)>),
}

/// Carries out queue commands; cheap to clone into tasks.
#[derive(Clone)]
pub struct PilotDriver {
    backend: Arc<dyn Backend>,
    issue: Option<IssueToken>,
    dir: PathBuf,
}

impl PilotDriver {
    /// A driver over `backend`, its files under `state_dir/pilots`.
    pub fn new(
        backend: Arc<dyn Backend>,
        issue: Option<IssueToken>,
        state_dir: PathBuf,
    ) -> PilotDriver {
        PilotDriver {
            backend,
            issue,
            dir: state_dir.join("pilots"),
        }
    }

    /// Carries out `cmd` on a task of its own; `report` gets the outcome.
    pub fn carry_out(&self, cmd: QueueCommand, report: impl FnOnce(PilotReport) + Send + 'static) {
        let me = self.clone();
        tokio::spawn(async move {
            match cmd {
                QueueCommand::Submit {
                    queue,
                    alloc,
                    spec,
                    machines,
                } => {
                    let result = me.submit(queue, alloc, spec, machines).await;
                    if let Err(e) = &result {
                        tracing::warn!(queue, alloc, "pilot allocation not submitted: {e}");
                    }
                    report(PilotReport::Submitted { alloc, result });
                }
                QueueCommand::Cancel { batch_job } => {
                    if let Err(e) = me.backend.cancel(batch_job.clone()).await {
                        tracing::warn!(batch_job, "cancelling the pilot failed: {e}");
                    }
                }
                QueueCommand::Poll { jobs } => match me.backend.status(jobs).await {
                    Ok(states) => report(PilotReport::States(states)),
                    Err(e) => tracing::warn!("asking the batch system about pilots failed: {e}"),
                },
                QueueCommand::DryRunDone { .. } => {}
            }
        });
    }

    async fn submit(
        &self,
        queue: u64,
        alloc: u64,
        spec: AllocQueueSpec,
        machines: Vec<String>,
    ) -> Result<String, String> {
        let dir = self.dir.join(format!("q{queue}"));
        let tokens = {
            let (dir, issue, machines) = (dir.clone(), self.issue.clone(), machines.clone());
            let lifetime = spec.time_limit_s + 3600;
            tokio::task::spawn_blocking(move || {
                write_tokens(&dir, issue.as_ref(), &machines, lifetime)
            })
            .await
            .map_err(|e| format!("writing the pilots' tokens: {e}"))??
        };
        let order = Order {
            queue,
            alloc,
            spec,
            machines,
            tokens,
            dir,
        };
        self.backend.submit(order).await
    }
}

/// Makes the queue's directory (0700) and one daemon token per pilot, each
/// written 0600: only the pilot's user may read it.
fn write_tokens(
    dir: &std::path::Path,
    issue: Option<&IssueToken>,
    machines: &[String],
    lifetime_s: u64,
) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Some(issue) = issue else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for m in machines {
        let token = issue(m, lifetime_s).map_err(|e| format!("a token for pilot {m}: {e}"))?;
        let path = dir.join(format!("{m}.token"));
        carmi_api::files::write_private(&path, &token, true)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}
