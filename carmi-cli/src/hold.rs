//! `carmi hold JOB...` and `carmi release JOB...`, as HTCondor's
//! condor_hold and condor_release: a held job keeps its place in the queue,
//! its processes are killed and its machines go back to the pool; released,
//! it waits again at its place and its master starts from scratch (as after
//! a vacate) once its minimums can be met. `carmi q` shows a held job as
//! `held` with the reason.

use carmi_api::admin::request;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::jobs::{connect, failed, print};

/// `carmi hold` options.
#[derive(Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The jobs to hold, as `j3` or `3`
    #[arg(required = true)]
    jobs: Vec<JobId>,
    /// Why, shown by `carmi q` and in the job's event log (or -reason);
    /// default "held by USER"
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `carmi release` options.
#[derive(Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The held jobs to release, as `j3` or `3`
    #[arg(required = true)]
    jobs: Vec<JobId>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Who holds: the user, as `carmi submit` names the owner.
fn user() -> String {
    crate::jobs::user_name()
}

/// Runs `carmi hold`.
pub fn hold(args: HoldArgs) -> anyhow::Result<()> {
    let user = user();
    each(&args.pool, &args.jobs, args.json, "hold", "held", |job| {
        ToGlobal::Hold {
            job,
            cluster: false,
            reason: args.reason.clone(),
            user: user.clone(),
        }
    })
}

/// Runs `carmi release`.
pub fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    each(
        &args.pool,
        &args.jobs,
        args.json,
        "release",
        "released",
        |job| ToGlobal::Release {
            job,
            cluster: false,
        },
    )
}

/// Sends `msg(job)` for every job, printing one line per job done; every
/// job is tried, and the command fails (naming each refusal) if any was refused.
fn each(
    pool: &PoolArgs,
    jobs: &[JobId],
    json: bool,
    what: &str,
    done: &str,
    msg: impl Fn(JobId) -> ToGlobal,
) -> anyhow::Result<()> {
    let (pool, secret) = connect(pool)?;
    let mut errors = Vec::new();
    for &job in jobs {
        let answer = crate::block_on(async { Ok(request(&pool, &secret, None, msg(job)).await?) })?;
        match answer {
            FromGlobal::Held { job } | FromGlobal::Released { job } => {
                if json {
                    print(&format!("{}\n", serde_json::json!({ done: job.0 })))?;
                } else {
                    print(&format!("job {} {done}\n", job.0))?;
                }
            }
            other => errors.push(failed(other, &format!("{what} {}", job.0))),
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow::bail!("{}", all.join("\n"))
        }
    }
}
