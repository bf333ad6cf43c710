//! Workers need not be written in Rust: a master in a few lines runs one
//! shell command per input file (`wc -l` by default) on command workers. A
//! step's data is a command line, its result the command's standard output
//! (see `wodi::cmd`). This executable is its own command worker, so the
//! example needs nothing installed; WoDi's `wodi-cmd-worker` binary does the
//! same for any master.

use std::path::PathBuf;

use clap::Parser;
use wodi::StepId;
use wodi::master::{Master, StepOutcome};
use wodi_examples::{Embedded, PoolArgs, RunPool};

/// Runs a shell command on every file of a folder, on WoDi workers.
#[derive(Parser, Debug)]
#[command(name = "commands", version)]
struct Args {
    /// The folder whose files are the inputs.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The command; the file's path is appended (shell-quoted).
    #[arg(long, default_value = "wc -l <")]
    command: String,
    /// Workers to ask for (and hosts of the embedded pool).
    #[arg(long, default_value_t = 4)]
    hosts: u32,
    /// Where to run (default: an embedded pool).
    #[command(flatten)]
    pool: PoolArgs,
}

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        return wodi::worker::Worker::new()
            .on_step_raw(|_, line| wodi::cmd::run_command(line))
            .run();
    }
    let args = Args::parse();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let embedded = Embedded::idle(args.hosts as usize);
    wodi_examples::run_on_pool(&args.pool, embedded, async |pool| {
        run(&args, &files, pool).await
    })
}

async fn run(args: &Args, files: &[PathBuf], pool: &RunPool) -> anyhow::Result<()> {
    let mut master = Master::init(pool.master_config(args.hosts)?, &()).await?;
    for (i, f) in files.iter().enumerate() {
        let path = std::path::absolute(f)?;
        // Single quotes keep the shell from reading anything in the path.
        let quoted = format!("'{}'", path.display().to_string().replace('\'', r"'\''"));
        let line = format!("{} {quoted}", args.command);
        master.send_work_raw(StepId(i as u64), line.into_bytes().into());
    }
    let mut out = vec![None; files.len()];
    for _ in 0..files.len() {
        match master.recv_result_raw().await? {
            StepOutcome::Done(step, text) => {
                out[step.0 as usize] = Some(String::from_utf8_lossy(&text).trim().to_string())
            }
            StepOutcome::Failed(step, why) => out[step.0 as usize] = Some(format!("failed: {why}")),
        }
    }
    master.complete().await?;
    for (f, o) in files.iter().zip(out) {
        println!("{:>10}  {}", o.unwrap_or_default(), f.display());
    }
    Ok(())
}
