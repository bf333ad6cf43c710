//! `carmi wait JOB`: blocks until a job leaves the queue and exits with its
//! exit status, so that scripts can chain on a job as on a local command
//! (HTCondor's `condor_wait`, Slurm's `sbatch --wait`).
//!
//! Exit codes: the master's own exit code when it exited; 128 + N when a
//! signal N killed it (as shells report it); 1 when the job was removed,
//! failed to start, or lost its master's machine (the reason on stderr);
//! 124 when `--timeout` passed first (as `timeout(1)` does).
//!
//! When the job's master sent files back (its output and error from another
//! machine, its `transfer_output_files`), they are written into the submit
//! directory before `wait` returns, as `carmi fetch` does; a failure to write
//! them is reported on stderr and does not change the exit code.

use std::time::{Duration, Instant};

use carmi_api::admin::request;
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{ExitStatus, FromGlobal, JobEnd, JobRecord, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::events::LogWriter;
use crate::jobs::{connect, failed};

/// `carmi wait` options.
#[derive(Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The job, as `C.P`; or a cluster `C`, waiting for every proc (the
    /// exit code is the first proc's that was not 0)
    job: crate::select::Target,
    /// Give up after this many seconds (exit code 124)
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
}

/// How often the global RM is asked; a job's end is seen within this.
const POLL: Duration = Duration::from_millis(250);
/// Exit code when `--timeout` passes first.
pub const TIMED_OUT: u8 = 124;

/// Runs `carmi wait`; returns the exit code.
pub fn run(args: WaitArgs) -> anyhow::Result<u8> {
    let (pool, secret) = connect(&args.pool)?;
    let started = Instant::now();
    let limit = args.timeout.map(Duration::from_secs_f64);
    crate::block_on(async {
        let mut code = 0;
        let mut waited = std::collections::BTreeSet::new();
        // Again until no proc is left: a cluster's procs past its
        // `max_materialize` join the queue as earlier ones end.
        loop {
            let jobs = jobs_of(&pool, &secret, &args.job).await?;
            let new: Vec<JobId> = jobs.into_iter().filter(|j| !waited.contains(j)).collect();
            if new.is_empty() {
                return Ok(code);
            }
            for job in new {
                let left = limit.map(|l| l.saturating_sub(started.elapsed()));
                let c = wait_one(&pool, &secret, job, left).await?;
                if c == TIMED_OUT {
                    return Ok(c);
                }
                if code == 0 {
                    code = c;
                }
                waited.insert(job);
            }
        }
    })
}

/// The jobs `carmi wait` waits for: one proc, or every proc of a cluster
/// that is queued or ended (a cluster of one: its job).
async fn jobs_of(
    pool: &str,
    secret: &Secret,
    t: &crate::select::Target,
) -> anyhow::Result<Vec<JobId>> {
    let crate::select::Target::Cluster(c) = t else {
        return Ok(vec![crate::select::one_job(pool, secret, t).await?]);
    };
    let mut jobs: Vec<JobId> = crate::select::queue(pool, secret)
        .await?
        .iter()
        .filter(|j| crate::select::names(t, j))
        .map(|j| j.job)
        .collect();
    if let FromGlobal::History(h) =
        request(pool, secret, None, ToGlobal::History { job: None }).await?
    {
        jobs.extend(
            h.iter()
                .filter(|r| crate::select::names_record(t, r))
                .map(|r| r.job),
        );
    }
    jobs.sort();
    jobs.dedup();
    if jobs.is_empty() {
        jobs.push(JobId(*c));
    }
    Ok(jobs)
}

/// Waits for one job to leave the queue (at most `limit`); its exit code.
async fn wait_one(
    pool: &str,
    secret: &Secret,
    job: JobId,
    limit: Option<Duration>,
) -> anyhow::Result<u8> {
    let started = Instant::now();
    // The job's `log =` file follows its events as they come; a job
    // whose events are not kept (started by hand) simply has none.
    let mut log = LogWriter::new(job);
    let mut after = 0;
    loop {
        after = log_events(pool, secret, job, after, &mut log).await;
        if let Some(record) = ended(pool, secret, job).await? {
            // The events up to its end, logged between the two questions.
            log_events(pool, secret, job, after, &mut log).await;
            return Ok(finish(pool, secret, &record).await);
        }
        if !queued(pool, secret, job).await? {
            // It may have left the queue between the two questions.
            if let Some(record) = ended(pool, secret, job).await? {
                log_events(pool, secret, job, after, &mut log).await;
                return Ok(finish(pool, secret, &record).await);
            }
            anyhow::bail!(
                "wait: job {} is neither queued nor in the history (never submitted, or older than the last jobs kept)",
                job.0
            );
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            eprintln!("carmi wait: job {} is still queued", job.0);
            return Ok(TIMED_OUT);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Appends `job`'s events after number `after` to its log file; returns the
/// last event number seen.
async fn log_events(
    pool: &str,
    secret: &Secret,
    job: JobId,
    after: u64,
    log: &mut LogWriter,
) -> u64 {
    match crate::events::fetch(pool, secret, job, after).await {
        Ok(a) => {
            log.write(a.log.as_deref(), &a.events);
            a.events.last().map_or(after, |e| e.seq)
        }
        Err(_) => after,
    }
}

async fn ended(pool: &str, secret: &Secret, job: JobId) -> anyhow::Result<Option<JobRecord>> {
    let answer = request(pool, secret, None, ToGlobal::History { job: Some(job) }).await?;
    let FromGlobal::History(mut jobs) = answer else {
        return Err(failed(answer, "wait"));
    };
    Ok(jobs.pop())
}

async fn queued(pool: &str, secret: &Secret, job: JobId) -> anyhow::Result<bool> {
    let answer = request(pool, secret, None, ToGlobal::Queue).await?;
    let FromGlobal::Queue(jobs) = answer else {
        return Err(failed(answer, "wait"));
    };
    Ok(jobs.iter().any(|j| j.job == job))
}

/// Brings the job's files back, then reports its end.
async fn finish(pool: &str, secret: &Secret, record: &JobRecord) -> u8 {
    if record.files.is_some()
        && let Err(e) = crate::fetch::bring_back(pool, secret, record.job).await
    {
        eprintln!(
            "carmi wait: the files of job {} were not brought back: {e:#}",
            record.job.0
        );
    }
    report(record)
}

/// Says how the job ended (on stderr unless it simply exited) and picks the exit code.
fn report(record: &JobRecord) -> u8 {
    let code = exit_code(&record.end);
    if !matches!(record.end, JobEnd::Completed(ExitStatus::Code(_))) {
        eprintln!(
            "carmi wait: job {} {}",
            record.job.0,
            crate::history::end_text(&record.end)
        );
    }
    code
}

/// The exit code `carmi wait` gives for a job's end.
pub fn exit_code(end: &JobEnd) -> u8 {
    match end {
        JobEnd::Completed(ExitStatus::Code(c)) => u8::try_from(*c).unwrap_or(1),
        JobEnd::Completed(ExitStatus::Signal(s)) => u8::try_from(128 + *s).unwrap_or(1),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shells() {
        assert_eq!(exit_code(&JobEnd::Completed(ExitStatus::Code(0))), 0);
        assert_eq!(exit_code(&JobEnd::Completed(ExitStatus::Code(3))), 3);
        assert_eq!(exit_code(&JobEnd::Completed(ExitStatus::Signal(9))), 137);
        assert_eq!(exit_code(&JobEnd::Removed), 1);
        assert_eq!(exit_code(&JobEnd::FailedToStart("no such file".into())), 1);
        assert_eq!(exit_code(&JobEnd::Completed(ExitStatus::HostLost)), 1);
    }
}
