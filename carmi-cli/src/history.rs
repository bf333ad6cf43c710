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
    /// Only these: a cluster `C` (every proc), a proc `C.P`, or a user name
    job: Option<crate::select::Target>,
    /// Only the last N jobs to end (or -limit N)
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Only jobs whose ad satisfies EXPR (or -constraint), with HTCondor's
    /// names: Owner, ClusterId, Cmd, QDate, JobStartDate, CompletionDate,
    /// ExitCode, ExitSignal, JobStatus (3 removed, 4 completed),
    /// RemoteWallClockTime, RemoteUserCpu, Machines, HoldReason...
    #[arg(long, alias = "const", value_name = "EXPR")]
    constraint: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `carmi history`.
pub fn run(args: HistoryArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    // One job is asked by id (`C`, `C.0`: job C); the rest are filtered here.
    let one = match &args.job {
        Some(crate::select::Target::Proc(c, 0)) => Some(JobId(*c)),
        _ => None,
    };
    let msg = ToGlobal::History { job: one };
    let answer = crate::block_on(async { Ok(request(&pool, &secret, None, msg).await?) })?;
    let FromGlobal::History(mut jobs) = answer else {
        return Err(failed(answer, "history"));
    };
    if let Some(text) = &args.constraint {
        let expr = classad::parse_expr(text).map_err(|e| {
            anyhow::anyhow!(
                "-constraint: not a ClassAd expression (column {}: {})",
                e.column,
                e.message
            )
        })?;
        jobs.retain(|j| record_ad(j).eval_expr(&expr, None).is_true());
    }
    if let Some(t) = &args.job {
        jobs.retain(|j| crate::select::names_record(t, j));
    }
    if let Some(n) = args.limit {
        jobs.drain(..jobs.len().saturating_sub(n));
    }
    if let Some(job) = &args.job
        && jobs.is_empty()
    {
        anyhow::bail!(
            "history: {job} is not in the history (still queued, never existed, or older than the last jobs kept)"
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
        JobEnd::RemovedByPolicy(why) => why.clone(),
        JobEnd::Detached => "ended: its first process disconnected".into(),
    }
}

/// `" (3 starts, 2 vacated)"` for a job put back in the queue before it
/// ended; empty for one that started once.
pub fn tries_text(u: &carmi_api::msg::JobUsage) -> String {
    if u.starts <= 1 && u.evictions == 0 && u.checkpoints == 0 {
        return String::new();
    }
    let mut parts = vec![format!("{} starts", u.starts)];
    if u.evictions > 0 {
        parts.push(format!("{} vacated by their owner", u.evictions));
    }
    if u.checkpoints > 0 {
        let s = if u.checkpoints == 1 { "" } else { "s" };
        parts.push(format!("{} checkpoint{s}", u.checkpoints));
    }
    format!(" ({})", parts.join(", "))
}

/// An ended job as a ClassAd with HTCondor's attribute names, for
/// `-constraint` (as `condor_history -constraint` reads its job ads).
pub fn record_ad(j: &JobRecord) -> classad::ClassAd {
    use classad::Value;
    let mut ad = classad::ClassAd::new();
    let int = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
    ad.insert_value("ClusterId", int(j.cluster.unwrap_or(j.job).0));
    ad.insert_value("ProcId", int(u64::from(j.proc)));
    ad.insert_value("Owner", Value::str(j.owner.as_str()));
    ad.insert_value("Cmd", Value::str(j.executable.as_str()));
    ad.insert_value("QDate", int(j.submitted_unix));
    ad.insert_value("CompletionDate", int(j.ended_unix));
    let u = &j.usage;
    if u.started_unix > 0 {
        ad.insert_value("JobStartDate", int(u.started_unix));
        ad.insert_value(
            "RemoteWallClockTime",
            int(j.ended_unix.saturating_sub(u.started_unix)),
        );
    }
    ad.insert_value("RemoteUserCpu", Value::Real(u.cpu_ms as f64 / 1000.0));
    ad.insert_value("Machines", Value::str(u.machines.join(",").as_str()));
    ad.insert_value("MachineCount", int(u.machines.len() as u64));
    ad.insert_value("NumJobStarts", int(u64::from(u.starts)));
    ad.insert_value("NumVacates", int(u64::from(u.evictions)));
    ad.insert_value("NumCheckpoints", int(u64::from(u.checkpoints)));
    if u.memory_peak_kib > 0 {
        // HTCondor's names: peak memory in KiB, and in MiB rounded up.
        ad.insert_value("ResidentSetSize", int(u.memory_peak_kib));
        ad.insert_value("MemoryUsage", int(u.memory_peak_kib.div_ceil(1024)));
    }
    let status = match &j.end {
        JobEnd::Removed | JobEnd::RemovedByPolicy(_) => 3,
        _ => 4,
    };
    ad.insert_value("JobStatus", Value::Int(status));
    match &j.end {
        JobEnd::Completed(ExitStatus::Code(c)) => {
            ad.insert_value("ExitCode", Value::Int(i64::from(*c)));
            ad.insert_value("ExitBySignal", Value::Bool(false));
        }
        JobEnd::Completed(ExitStatus::Signal(sig)) => {
            ad.insert_value("ExitSignal", Value::Int(i64::from(*sig)));
            ad.insert_value("ExitBySignal", Value::Bool(true));
        }
        other => ad.insert_value("EndReason", Value::str(end_text(other).as_str())),
    }
    ad
}

/// `1h02m`, `3m07s`, `12s`; `-` when unknown.
fn duration(seconds: Option<u64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        Some(s) if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        Some(s) => format!("{s}s"),
    }
}

/// Peak memory for the table: `612M` (MiB, rounded up); `-` when not measured.
fn memory(kib: u64) -> String {
    if kib == 0 {
        "-".into()
    } else {
        format!("{}M", kib.div_ceil(1024))
    }
}

/// The `carmi history` table: one line per job, then a summary line.
pub fn history_text(jobs: &[JobRecord]) -> String {
    let mut out = format!(
        "{:>7}  {:<10} {:<11}  {:<11}  {:>7}  {:>7}  {:>7}  {:>5}  {:<12}  {}\n",
        "ID", "OWNER", "SUBMITTED", "ENDED", "WALL", "CPU", "MEM", "HOSTS", "EXECUTABLE", "HOW"
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
        let u = &j.usage;
        let wall = (u.started_unix > 0).then(|| j.ended_unix.saturating_sub(u.started_unix));
        out.push_str(&format!(
            "{:>7}  {:<10} {:<11}  {:<11}  {:>7}  {:>7}  {:>7}  {:>5}  {:<12}  {}\n",
            crate::select::record_id(j),
            owner,
            short_time(j.submitted_unix),
            short_time(j.ended_unix),
            duration(wall),
            duration(Some(u.cpu_ms / 1000)),
            memory(u.memory_peak_kib),
            u.machines.len(),
            exe,
            end_text(&j.end) + &tries_text(u)
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
    use carmi_api::msg::JobUsage;

    fn record(job: u64, end: JobEnd) -> JobRecord {
        JobRecord {
            job: JobId(job),
            cluster: None,
            proc: 0,
            owner: "alice".into(),
            executable: "master.sh".into(),
            submitted_unix: 86_400 + 3_600,
            ended_unix: 86_400 + 7_260,
            end,
            files: None,
            usage: Default::default(),
        }
    }

    #[test]
    fn constraints_read_htcondor_names() {
        let mut done = record(1, JobEnd::Completed(ExitStatus::Code(3)));
        done.usage = JobUsage {
            started_unix: 86_400 + 3_700,
            cpu_ms: 2_500,
            machines: vec!["m0".into(), "m1".into()],
            starts: 2,
            evictions: 1,
            checkpoints: 0,
            memory_peak_kib: 102_401,
        };
        let ad = record_ad(&done);
        let holds = |e: &str| {
            ad.eval_expr(&classad::parse_expr(e).unwrap(), None)
                .is_true()
        };
        assert!(holds(
            "ExitCode == 3 && JobStatus == 4 && Owner == \"alice\""
        ));
        assert!(holds("RemoteWallClockTime == 3560 && RemoteUserCpu == 2.5"));
        assert!(holds("MachineCount == 2 && Machines == \"m0,m1\""));
        assert!(holds("NumJobStarts == 2 && NumVacates == 1"));
        assert!(holds("ResidentSetSize == 102401 && MemoryUsage == 101"));
        assert!(!holds("ExitBySignal"));
        let removed = record_ad(&record(2, JobEnd::Removed));
        assert!(
            removed
                .eval_expr(&classad::parse_expr("JobStatus == 3").unwrap(), None)
                .is_true()
        );
        let why = "removed by periodic_remove: (time() - QDate) > 5";
        let by_policy = record(3, JobEnd::RemovedByPolicy(why.into()));
        let ad = record_ad(&by_policy);
        let removed = classad::parse_expr("JobStatus == 3").unwrap();
        assert!(ad.eval_expr(&removed, None).is_true());
        assert!(history_text(&[by_policy]).contains(why));
        let text = history_text(&[done]);
        assert!(text.contains("59m20s") && text.contains("2s"), "{text}");
        assert!(
            text.contains("completed, exit 3 (2 starts, 1 vacated by their owner)"),
            "{text}"
        );
        assert!(text.contains(" MEM ") && text.contains(" 101M "), "{text}");
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
