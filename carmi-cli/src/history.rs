//! `carmi history`: the jobs that left the queue, oldest first, and how each
//! ended (completed with its exit status, removed, or failed to start with
//! the local RM's reason), as HTCondor's `condor_history` shows them.

use carmi_api::admin::request;
use carmi_api::ids::JobId;
use carmi_api::msg::{ExitStatus, FromGlobal, JobEnd, JobRecord, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::jobs::{connect, failed, json_text, print, short_time};

/// `carmi history` options.
#[derive(Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Only this job, as `j3` or `3`
    job: Option<JobId>,
    /// Only the last N jobs to end (or -limit N)
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `carmi history`.
pub fn run(args: HistoryArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    let msg = ToGlobal::History { job: args.job };
    let answer = crate::block_on(async { Ok(request(&pool, &secret, None, msg).await?) })?;
    let FromGlobal::History(mut jobs) = answer else {
        return Err(failed(answer, "history"));
    };
    if let Some(n) = args.limit {
        jobs.drain(..jobs.len().saturating_sub(n));
    }
    if let Some(job) = args.job
        && jobs.is_empty()
    {
        anyhow::bail!(
            "history: job {} is not in the history (still queued, never existed, or older than the last jobs kept)",
            job.0
        );
    }
    if args.json {
        print(&json_text(&jobs))
    } else {
        print(&history_text(&jobs))
    }
}

/// How a job ended, in words.
pub fn end_text(end: &JobEnd) -> String {
    match end {
        JobEnd::Completed(ExitStatus::Code(c)) => format!("completed, exit {c}"),
        JobEnd::Completed(ExitStatus::Signal(s)) => format!("completed, killed by signal {s}"),
        JobEnd::Completed(ExitStatus::HostLost) => "ended: its master's machine was lost".into(),
        JobEnd::Completed(ExitStatus::FailedToStart(r)) | JobEnd::FailedToStart(r) => {
            format!("failed to start: {r}")
        }
        JobEnd::Removed => "removed".into(),
        JobEnd::Detached => "ended: its first process disconnected".into(),
    }
}

/// The `carmi history` table: one line per job, then a summary line.
pub fn history_text(jobs: &[JobRecord]) -> String {
    let mut out = format!(
        "{:>5}  {:<10} {:<11}  {:<11}  {:<12}  {}\n",
        "ID", "OWNER", "SUBMITTED", "ENDED", "EXECUTABLE", "HOW"
    );
    let mut failed = 0;
    for j in jobs {
        if matches!(
            j.end,
            JobEnd::FailedToStart(_) | JobEnd::Completed(ExitStatus::FailedToStart(_))
        ) {
            failed += 1;
        }
        let owner: String = j.owner.chars().take(10).collect();
        let exe: String = j.executable.chars().take(12).collect();
        out.push_str(&format!(
            "{:>5}  {:<10} {:<11}  {:<11}  {:<12}  {}\n",
            j.job.0,
            owner,
            short_time(j.submitted_unix),
            short_time(j.ended_unix),
            exe,
            end_text(&j.end)
        ));
    }
    out.push_str(&format!(
        "{} job{}, {failed} failed to start\n",
        jobs.len(),
        if jobs.len() == 1 { "" } else { "s" },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(job: u64, end: JobEnd) -> JobRecord {
        JobRecord {
            job: JobId(job),
            owner: "alice".into(),
            executable: "master.sh".into(),
            submitted_unix: 86_400 + 3_600,
            ended_unix: 86_400 + 7_260,
            end,
            files: None,
        }
    }

    #[test]
    fn the_table_says_how_each_job_ended() {
        let text = history_text(&[
            record(1, JobEnd::Completed(ExitStatus::Code(0))),
            record(2, JobEnd::Removed),
            record(
                3,
                JobEnd::FailedToStart("cannot execute master.sh: Exec format error".into()),
            ),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].contains("ENDED"), "{text}");
        assert!(
            lines[1].contains("01/02 01:00")
                && lines[1].contains("01/02 02:01")
                && lines[1].ends_with("completed, exit 0"),
            "{text}"
        );
        assert!(lines[2].ends_with("removed"), "{text}");
        assert!(
            lines[3].ends_with("failed to start: cannot execute master.sh: Exec format error"),
            "{text}"
        );
        assert_eq!(lines[4], "3 jobs, 1 failed to start");
    }
}
