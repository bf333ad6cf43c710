//! `carmi q` (with `-analyze`) and `carmi rm`, and what the job commands
//! share (`carmi submit` lives in `submit`, `carmi history` in `history`).

use carmi_api::admin::request;
use carmi_api::msg::{ClassAnalysis, FromGlobal, JobAnalysis, JobStatus, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::select::{self, Target};

/// `carmi q` options.
#[derive(Args)]
pub struct QArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Only these: clusters `C`, procs `C.P` or user names (all when none)
    #[arg(value_name = "JOB|USER")]
    targets: Vec<Target>,
    /// Only jobs whose ad satisfies EXPR (or -constraint): ClusterId, ProcId,
    /// Owner, Cmd, QDate, JobStatus (1 idle, 2 running, 5 held), HoldReason
    #[arg(long, alias = "const", value_name = "EXPR")]
    constraint: Option<String>,
    /// Why JOB's classes are not satisfied (or -analyze, -better-analyze);
    /// JOB as `C` or `C.P`
    #[arg(long, value_name = "JOB")]
    analyze: Option<Target>,
    /// Only held jobs, each with why it is held (or -hold; see `carmi hold`)
    #[arg(long)]
    hold: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `carmi rm` options.
#[derive(Args)]
pub struct RmArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The jobs to remove: their processes are killed, their machines freed
    #[command(flatten)]
    jobs: crate::act::Selection,
    /// Print JSON ({"removed": N}, one line per job or cluster).
    #[arg(long)]
    json: bool,
}

// Shared by every command that asks the global RM; kept here too so that
// `crate::jobs::{connect, failed, print}` still names them.
pub(crate) use crate::talk::{connect, failed, print};

pub(crate) use crate::talk::user_name;

/// Runs `carmi rm`.
pub fn rm(args: RmArgs) -> anyhow::Result<()> {
    crate::act::each(
        &args.pool,
        &args.jobs,
        args.json,
        "rm",
        "removed",
        |job, cluster| ToGlobal::RemoveJob { job, cluster },
    )
}

/// Runs `carmi q` and `carmi q -analyze JOB`.
pub fn q(args: QArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    if let Some(target) = &args.analyze {
        let job = crate::block_on(select::one_job(&pool, &secret, target))?;
        let msg = ToGlobal::Analyze { job };
        let answer = crate::block_on(async { Ok(request(&pool, &secret, None, msg).await?) })?;
        let FromGlobal::Analysis(a) = answer else {
            return Err(failed(answer, &format!("analyze {job}")));
        };
        return if args.json {
            print(&json_text(&a))
        } else {
            print(&analysis_text(&a))
        };
    }
    let answer =
        crate::block_on(async { Ok(request(&pool, &secret, None, ToGlobal::Queue).await?) })?;
    let FromGlobal::Queue(mut jobs) = answer else {
        return Err(failed(answer, "q"));
    };
    if args.hold {
        jobs.retain(|j| j.state == "held");
    }
    if !args.targets.is_empty() {
        jobs.retain(|j| args.targets.iter().any(|t| select::names(t, j)));
    }
    if let Some(text) = &args.constraint {
        let expr = select::constraint(text)?;
        jobs.retain(|j| select::job_ad(j).eval_expr(&expr, None).is_true());
    }
    if args.json {
        print(&json_text(&jobs))
    } else {
        print(&queue_text(&jobs))
    }
}

pub(crate) fn json_text<T: serde::Serialize>(v: &T) -> String {
    let mut t = serde_json::to_string_pretty(v).expect("protocol types serialize");
    t.push('\n');
    t
}

/// `MM/DD HH:MM` (UTC) of a Unix time; `-` for 0.
pub fn short_time(unix: u64) -> String {
    if unix == 0 {
        return "-".into();
    }
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!(
        "{month:02}/{day:02} {:02}:{:02}",
        secs / 3600,
        (secs % 3600) / 60
    )
}

/// The `carmi q` table: one line per job, then a summary line.
pub fn queue_text(jobs: &[JobStatus]) -> String {
    let mut out = format!(
        "{:>7}  {:<10} {:<11}  {:<8}  {}\n",
        "ID", "OWNER", "SUBMITTED", "STATE", "HOSTS (held/min..max per class)"
    );
    let (mut running, mut waiting, mut held) = (0, 0, 0);
    let mut held_jobs = 0;
    for j in jobs {
        match j.state.as_str() {
            "waiting" => waiting += 1,
            "held" => held_jobs += 1,
            _ => running += 1,
        }
        let classes: Vec<String> = j
            .classes
            .iter()
            .map(|c| {
                held += c.held;
                if c.max == 0 {
                    format!("{} {}", c.name, c.held)
                } else {
                    format!("{} {}/{}..{}", c.name, c.held, c.min, c.max)
                }
            })
            .collect();
        let owner: String = j.owner.chars().take(10).collect();
        out.push_str(&format!(
            "{:>7}  {:<10} {:<11}  {:<8}  {}\n",
            select::proc_id(j),
            owner,
            short_time(j.submitted_unix),
            j.state,
            classes.join(", ")
        ));
        if let Some(note) = &j.note {
            out.push_str(&format!("{:>7}  ^ {note}\n", ""));
        }
        if let Some(line) = crate::progress::wodi_line(&j.attrs) {
            out.push_str(&format!("{:>7}  ^ {line}\n", ""));
        }
    }
    // Held jobs are counted only when there are some, so that the line
    // reads as before for everyone who never holds a job.
    let held_part = if held_jobs > 0 {
        format!(", {held_jobs} on hold")
    } else {
        String::new()
    };
    out.push_str(&format!(
        "{} job{}: {running} running, {waiting} waiting{held_part}; {held} host{} held\n",
        jobs.len(),
        if jobs.len() == 1 { "" } else { "s" },
        if held == 1 { "" } else { "s" },
    ));
    out.push_str(&crate::users::users_text(jobs));
    out
}

fn class_text(c: &ClassAnalysis, waiting: bool) -> String {
    let s = &c.class;
    let mut out = format!(
        "Class `{}`: holds {} (min {}, max {})\n  requirements: {}\n",
        s.name, s.held, s.min, s.max, s.requirements
    );
    if let Some(rank) = &s.rank {
        out.push_str(&format!(
            "  rank: {rank} (higher first, then the fastest)\n"
        ));
    }
    let rows = [
        (c.rejected_by_class, "rejected by the class's requirements"),
        (
            c.rejecting_job,
            "on machines whose Requirements reject the job",
        ),
        (c.held_by_job, "held by this job"),
        (c.claimed_by_others, "claimed by other jobs"),
        (
            c.preemptible,
            "  of which above their job's minimum (can be taken back)",
        ),
        (c.owner, "taken by their owners"),
        (c.idle, "idle"),
    ];
    out.push_str(&format!("  {:>5} slots in the pool:\n", c.slots));
    for (n, what) in rows {
        out.push_str(&format!("  {n:>5} {what}\n"));
        if what == "taken by their owners" {
            for (machine, why) in &c.owner_reasons {
                out.push_str(&format!("          {machine}: {why}\n"));
            }
        }
    }
    let usable = c.idle + if waiting { 0 } else { c.held_by_job };
    let verdict = if waiting && c.idle + c.preemptible < s.min {
        format!(
            "cannot start: needs {} at once, {} idle and {} reclaimable now",
            s.min, c.idle, c.preemptible
        )
    } else if waiting {
        "enough for this class; another class or an earlier job holds it up".to_string()
    } else if s.max > 0 && s.held >= s.max {
        "satisfied: at its maximum".to_string()
    } else if s.max > 0 && c.idle == 0 {
        format!(
            "below its maximum ({} of {}): no idle machine matches",
            s.held, s.max
        )
    } else if s.max == 0 {
        "defined at run time: grows only through AddHosts".to_string()
    } else {
        format!("{usable} usable now")
    };
    out.push_str(&format!("  -> {verdict}\n"));
    out
}

/// The `carmi q -analyze` text.
pub fn analysis_text(a: &JobAnalysis) -> String {
    let j = &a.job;
    let waiting = j.state == "waiting";
    let mut out = format!("Job {} ({}), {}", j.job.0, j.owner, j.state);
    if waiting {
        out.push_str(&format!(
            ", {} job{} ahead in the queue",
            a.queued_ahead,
            if a.queued_ahead == 1 { "" } else { "s" }
        ));
    }
    out.push('\n');
    if waiting {
        out.push_str(
            "A job starts once all its minimums can be met at once; earlier jobs go first.\n",
        );
    }
    if j.state == "held" {
        out.push_str(&format!(
            "It is held ({}): it waits for `carmi release {}`, then at its place in the queue.\n",
            j.note.as_deref().unwrap_or("no reason given"),
            j.job.0
        ));
    }
    // Why its master waits, or why it went back to the queue last.
    if j.state != "held"
        && let Some(note) = &j.note
    {
        out.push_str(&format!("Note: {note}.\n"));
    }
    for c in &a.classes {
        out.push_str(&class_text(c, waiting));
    }
    out
}

/// Turns HTCondor-style single-dash long options into clap's double-dash ones.
pub fn htcondor_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|a| match a.as_str() {
            "-better-analyze" => "--analyze".into(),
            // HTCondor spells long options with one dash. Left alone, clap
            // reads `-hold` as `-h old` and prints the help.
            _ if is_single_dash_word(&a) => format!("-{a}"),
            _ => a,
        })
        .collect()
}

/// `-word`: one dash, then a letter and at least one more letter, digit,
/// `-` or `_` (not `-1`, not `--x`, not `-h`).
fn is_single_dash_word(arg: &str) -> bool {
    let Some(rest) = arg.strip_prefix('-') else {
        return false;
    };
    let mut chars = rest.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && rest.len() > 1
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use carmi_api::msg::ClassStatus;

    use super::*;

    #[test]
    fn htcondor_single_dash_words_become_long_options() {
        let args = |v: &[&str]| htcondor_args(v.iter().map(|s| s.to_string()));
        assert_eq!(
            args(&["carmi", "q", "-hold", "-better-analyze", "3"]),
            ["carmi", "q", "--hold", "--analyze", "3"]
        );
        // Short options, negative numbers, long options and values stay.
        assert_eq!(
            args(&["-l", "-1", "--json", "-x_", "State == \"Owner\""]),
            ["-l", "-1", "--json", "--x_", "State == \"Owner\""]
        );
    }

    fn analysis(rank: Option<&str>) -> JobAnalysis {
        let class = ClassStatus {
            name: "w".into(),
            requirements: "Memory > 1".into(),
            rank: rank.map(str::to_string),
            held: 1,
            min: 1,
            max: 2,
        };
        JobAnalysis {
            job: JobStatus {
                job: carmi_api::ids::JobId(4),
                cluster: None,
                proc: 0,
                owner: "alice".into(),
                submitted_unix: 0,
                state: "running".into(),
                executable: "m".into(),
                master: None,
                classes: vec![class.clone()],
                note: None,
                user: None,
                attrs: Vec::new(),
            },
            queued_ahead: 0,
            classes: vec![ClassAnalysis {
                class,
                slots: 3,
                rejected_by_class: 0,
                rejecting_job: 0,
                held_by_job: 1,
                claimed_by_others: 0,
                preemptible: 0,
                owner: 1,
                idle: 2,
                owner_reasons: vec![(
                    "desk7".into(),
                    "START is false: KeyboardIdle > 900 (KeyboardIdle = 32)".into(),
                )],
            }],
        }
    }

    #[test]
    fn analyze_shows_a_class_rank_only_when_it_has_one() {
        let text = analysis_text(&analysis(Some("KFlops * 2")));
        assert!(text.contains("  rank: KFlops * 2"), "{text}");
        let text = analysis_text(&analysis(None));
        assert!(!text.contains("rank:"), "{text}");
    }

    #[test]
    fn analyze_says_why_owners_hold_their_machines() {
        let text = analysis_text(&analysis(None));
        let owners = text.find("taken by their owners").unwrap();
        let why = text
            .find("desk7: START is false: KeyboardIdle > 900 (KeyboardIdle = 32)")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(why > owners, "{text}");
    }

    #[test]
    fn analyze_says_why_a_job_went_back_to_the_queue() {
        let mut a = analysis(None);
        a.job.state = "waiting".into();
        a.job.note = Some("vacated by the owner of m0 (the machine's PREEMPT policy)".into());
        let text = analysis_text(&a);
        assert!(
            text.contains("Note: vacated by the owner of m0 (the machine's PREEMPT policy).\n"),
            "{text}"
        );
    }
}
