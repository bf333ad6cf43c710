//! `carmi hold JOB...` and `carmi release JOB...`, as HTCondor's
//! condor_hold and condor_release: a held job keeps its place in the queue,
//! its processes are killed and its machines go back to the pool; released,
//! it waits again at its place and its master starts from scratch (as after
//! a vacate) once its minimums can be met. `carmi q` shows a held job as
//! `held` with the reason.

use carmi_api::msg::ToGlobal;
use clap::Args;

use crate::act::{Selection, each};
use crate::config::PoolArgs;

/// `carmi hold` options.
#[derive(Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    jobs: Selection,
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
    #[command(flatten)]
    jobs: Selection,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `carmi hold`.
pub fn hold(args: HoldArgs) -> anyhow::Result<()> {
    // Who holds: the user, as `carmi submit` names the owner.
    let user = crate::jobs::user_name();
    each(
        &args.pool,
        &args.jobs,
        args.json,
        "hold",
        "held",
        |job, cluster| ToGlobal::Hold {
            job,
            cluster,
            reason: args.reason.clone(),
            user: user.clone(),
        },
    )
}

/// Runs `carmi release`.
pub fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    each(
        &args.pool,
        &args.jobs,
        args.json,
        "release",
        "released",
        |job, cluster| ToGlobal::Release { job, cluster },
    )
}
