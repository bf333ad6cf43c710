//! `carmi events JOB [-f]`: a submitted job's event log (submitted, master
//! started, hosts added / suspended / resumed / lost, held, released,
//! ended), one event a line in the format of [`carmi_api::events`]; `-f`
//! follows it until the job ends.
//!
//! # The submit file's `log = FILE`
//! The global RM keeps the events; the carmi commands that follow a job
//! write them to its log file, on the machine where they run: `carmi
//! submit` (the `submitted` line), `carmi wait` and `carmi events` (every
//! event they see). Each appends only the lines the file lacks (an event is
//! known by its job id and number), so several of them, or several jobs of
//! one `queue N`, can share one file. A job nobody waits for or looks at
//! leaves the file at its `submitted` line until someone does (`carmi
//! events JOB` catches it up while the global RM keeps the job's events);
//! run on a machine that does not have the file's directory (another
//! machine than the submit one, without a shared file system), they write
//! nothing and say so.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use carmi_api::admin::request;
use carmi_api::events::{JobEvent, parse_line_key};
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::talk::{connect, failed, print};

/// `carmi events` options.
#[derive(Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The job, as `C` or `C.P`
    job: crate::select::Target,
    /// Follow: print events as they come, until the job ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// One JSON object a line instead of text.
    #[arg(long)]
    json: bool,
}

/// How often `-f` asks the global RM.
const POLL: Duration = Duration::from_millis(250);

/// A job's events after number `after`, whether it ended, and its log file.
pub struct Answer {
    /// The events, oldest first.
    pub events: Vec<JobEvent>,
    /// True once the job ended.
    pub ended: bool,
    /// The submit file's `log =`.
    pub log: Option<String>,
}

/// Asks the global RM for `job`'s events after number `after`.
pub async fn fetch(pool: &str, secret: &Secret, job: JobId, after: u64) -> anyhow::Result<Answer> {
    let answer = request(pool, secret, None, ToGlobal::Events { job, after }).await?;
    match answer {
        FromGlobal::Events {
            events, ended, log, ..
        } => Ok(Answer { events, ended, log }),
        other => Err(failed(other, "events")),
    }
}

/// Runs `carmi events`.
pub fn run(args: EventsArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    crate::block_on(async {
        let job = crate::select::one_job(&pool, &secret, &args.job).await?;
        let mut log = LogWriter::new(job);
        let mut after = 0;
        loop {
            let answer = fetch(&pool, &secret, job, after).await?;
            let mut text = String::new();
            for e in &answer.events {
                if args.json {
                    text.push_str(&serde_json::to_string(e).expect("events serialize"));
                } else {
                    text.push_str(&e.to_string());
                }
                text.push('\n');
                after = after.max(e.seq);
            }
            print(&text)?;
            std::io::stdout().flush().ok();
            log.write(answer.log.as_deref(), &answer.events);
            if !args.follow || answer.ended {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// Appends a job's events to its `log =` file, each once. Problems are
/// warnings (once each): the events are still printed or waited for.
pub struct LogWriter {
    job: JobId,
    /// The highest event number of this job in the file, once read.
    written: Option<u64>,
    warned: bool,
}

impl LogWriter {
    /// A writer for `job` that has not read its file yet.
    pub fn new(job: JobId) -> LogWriter {
        LogWriter {
            job,
            written: None,
            warned: false,
        }
    }

    /// Appends the events of `events` the file `path` lacks.
    pub fn write(&mut self, path: Option<&str>, events: &[JobEvent]) {
        let Some(path) = path else {
            return;
        };
        if let Err(e) = self.try_write(Path::new(path), events)
            && !std::mem::replace(&mut self.warned, true)
        {
            eprintln!("carmi: warning: log: {e:#}; the job's events are not written there");
        }
    }

    fn try_write(&mut self, path: &Path, events: &[JobEvent]) -> anyhow::Result<()> {
        if let Some(dir) = path.parent()
            && !dir.is_dir()
        {
            anyhow::bail!(
                "{} does not exist on this machine (run carmi on the submit machine)",
                dir.display()
            );
        }
        let written = match self.written {
            Some(w) => w,
            None => last_in_file(path, self.job)?,
        };
        let new: Vec<&JobEvent> = events.iter().filter(|e| e.seq > written).collect();
        self.written = Some(new.last().map_or(written, |e| e.seq));
        if new.is_empty() {
            return Ok(());
        }
        let text: String = new.iter().map(|e| format!("{e}\n")).collect();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// The highest event number of `job` in the log file (0 when it has none,
/// or the file does not exist yet).
fn last_in_file(path: &Path, job: JobId) -> anyhow::Result<u64> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut last = 0;
    for line in std::io::BufReader::new(file).split(b'\n') {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if let Some((j, seq)) = std::str::from_utf8(&line).ok().and_then(parse_line_key)
            && j == job
        {
            last = last.max(seq);
        }
    }
    Ok(last)
}

/// Writes the events the global RM has of `jobs` to their log files, as
/// `carmi submit` does right after queueing them (the `submitted` line).
pub async fn write_logs(pool: &str, secret: &Secret, jobs: &[JobId]) {
    for &job in jobs {
        match fetch(pool, secret, job, 0).await {
            Ok(a) => LogWriter::new(job).write(a.log.as_deref(), &a.events),
            Err(e) => eprintln!("carmi: warning: log of job {}: {e:#}", job.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use carmi_api::events::EventKind;

    use super::*;

    fn ev(job: u64, seq: u64) -> JobEvent {
        JobEvent {
            job: JobId(job),
            seq,
            unix: 0,
            kind: EventKind::Released,
        }
    }

    #[test]
    fn each_event_is_written_once_beside_other_jobs_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        std::fs::write(&path, "a line of the user\n").unwrap();
        let p = path.to_str().unwrap();
        LogWriter::new(JobId(2)).write(Some(p), &[ev(2, 1), ev(2, 2)]);
        LogWriter::new(JobId(3)).write(Some(p), &[ev(3, 1)]);
        // A second writer of job 2 (another `carmi wait`) adds only what is new.
        LogWriter::new(JobId(2)).write(Some(p), &[ev(2, 1), ev(2, 2), ev(2, 3)]);
        let keys: Vec<_> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| parse_line_key(l).map(|(j, s)| (j.0, s)))
            .collect();
        assert_eq!(
            keys,
            [None, Some((2, 1)), Some((2, 2)), Some((3, 1)), Some((2, 3))]
        );
    }
}
