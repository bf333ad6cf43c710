//! `carmi logs JOB [-f] [--stderr]`: a running job's master's standard
//! output (or error), read where the master runs (the global RM asks that
//! machine's local RM, at most `carmi_api::limits::MAX_LOG_CHUNK_BYTES` an
//! answer). Without `-f` it prints what there is and exits; `-f` follows
//! until the job ends (waiting for a master that has not started yet).
//!
//! Once the job has ended, the pool keeps only what its master sent back
//! (`carmi fetch`): the output of a master placed away from its submit
//! machine. That is printed (from where `-f` had got to); otherwise the
//! command says that nothing is kept.

use std::io::Write;
use std::time::Duration;

use carmi_api::admin::{request, request_with_payload};
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{FailureCode, FromGlobal, StdStream, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::jobs::{connect, failed};

/// `carmi logs` options.
#[derive(Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The job, as `C` or `C.P`
    job: crate::select::Target,
    /// Follow: print output as it comes, until the job ends.
    #[arg(short = 'f', long)]
    follow: bool,
    /// The master's standard error instead of its standard output.
    #[arg(long)]
    stderr: bool,
}

/// How often `-f` asks again when there was nothing new.
const POLL: Duration = Duration::from_millis(250);

/// Answers in a row with the same reason before `-f` says why it waits.
const SAY_AFTER: u32 = 4;

/// Runs `carmi logs`.
pub fn run(args: LogsArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    let stream = if args.stderr {
        StdStream::Stderr
    } else {
        StdStream::Stdout
    };
    crate::block_on(async {
        let job = crate::select::one_job(&pool, &secret, &args.job).await?;
        follow(&pool, &secret, job, stream, args.follow).await
    })
}

async fn follow(
    pool: &str,
    secret: &Secret,
    job: JobId,
    stream: StdStream,
    follow: bool,
) -> anyhow::Result<()> {
    let mut offset = 0u64;
    // Why it could not be read, how many times in a row, and whether that
    // was said: a master that just exited is briefly "not running" before
    // its job ends, which is not worth a line.
    let mut said: (Option<String>, u32, bool) = (None, 0, false);
    let mut out = std::io::stdout();
    loop {
        let msg = ToGlobal::Logs {
            job,
            stream,
            offset,
        };
        match request(pool, secret, None, msg).await? {
            FromGlobal::Log {
                chunk: Some(chunk), ..
            } => {
                out.write_all(chunk.text.as_bytes())?;
                out.flush()?;
                let more = chunk.next < chunk.size && chunk.next > offset;
                offset = chunk.next;
                said = (None, 0, false);
                if more {
                    continue;
                }
                if !follow {
                    return Ok(());
                }
            }
            FromGlobal::Log { chunk: None, .. } => {
                return ended(pool, secret, job, stream, offset).await;
            }
            FromGlobal::AdminFailed(f) if follow && f.code == FailureCode::Unavailable => {
                // Not started yet, its machine reconnecting, or it just
                // exited: asked again until the job has ended.
                if said.0.as_deref() != Some(f.message.as_str()) {
                    said = (Some(f.message), 0, false);
                }
                said.1 += 1;
                if said.1 >= SAY_AFTER && !said.2 {
                    eprintln!("carmi: {}; waiting", said.0.as_deref().unwrap_or_default());
                    said.2 = true;
                }
            }
            other => return Err(failed(other, &format!("logs of job {}", job.0))),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The job ended: prints what its master sent back of `stream` from
/// `offset`, or says that nothing is kept.
async fn ended(
    pool: &str,
    secret: &Secret,
    job: JobId,
    stream: StdStream,
    offset: u64,
) -> anyhow::Result<()> {
    let name = match stream {
        StdStream::Stdout => "stdout",
        StdStream::Stderr => "stderr",
    };
    let (answer, payload) =
        request_with_payload(pool, secret, &[], ToGlobal::FetchFiles { job }).await?;
    if let FromGlobal::Files(files) = answer {
        let mut at = 0usize;
        for f in &files.files {
            let end = at.saturating_add(f.size as usize).min(payload.len());
            if f.name == name {
                let bytes = &payload[at..end];
                let from = (offset as usize).min(bytes.len());
                let mut out = std::io::stdout();
                out.write_all(&bytes[from..])?;
                out.flush()?;
                return Ok(());
            }
            at = end;
        }
    }
    if offset > 0 {
        eprintln!(
            "carmi: job {} has ended; whatever its master wrote after byte {offset} of its standard {} is not kept by the pool (only in the submit file's `{}` on the machine that ran it, if it named one)",
            job.0,
            if name == "stdout" { "output" } else { "error" },
            if name == "stdout" { "output" } else { "error" },
        );
    } else {
        eprintln!(
            "carmi: job {} has ended; the pool keeps no copy of its master's standard {} (it went to the submit file's `{}` on the machine that ran it, or nowhere)",
            job.0,
            if name == "stdout" { "output" } else { "error" },
            if name == "stdout" { "output" } else { "error" },
        );
    }
    Ok(())
}
