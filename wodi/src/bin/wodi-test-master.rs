//! A master for WoDi's checkpoint and kill tests, run as its own process so
//! the tests can SIGKILL it (or its server) mid-run and start it again.
//!
//! `wodi-test-master LOCAL SECRET SERVER WORKER CHECKPOINT LOG CYCLES
//! [HOSTS STEPS STEP_MS]`: runs cycles of STEPS steps (4 by default;
//! `sleep STEP_MS` each on the test worker, 150 by default) on HOSTS hosts
//! (2) of the pool at LOCAL, resuming after the checkpoint's cycle if the
//! file exists. It appends to LOG `resume C N` (resumed after cycle C with
//! N history estimates), `begin C` and `done C` (cycle C checkpointed),
//! then `complete`. Its state is the list of cycles it completed, which it
//! checks.
//!
//! Before it checkpoints a cycle it checks that the cycle's every step came
//! back exactly once, computed with that cycle's data: a step answered
//! twice, an answer carrying another cycle's data (a late copy of an earlier
//! cycle's step) or a failed step is logged as `VIOLATION ...` and ends it
//! with exit code 3. Any other error (the server killed) is logged as
//! `error ...` and ends it with exit code 1.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use wodi::master::{Master, MasterConfig, PoolAddr, ServerCommand, StepOutcome};
use wodi::{CycleId, StepId};

fn log(path: &str, line: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{line}")?;
    f.sync_all()?;
    Ok(())
}

/// A broken promise of the run (as opposed to an error of the run).
struct Violation(String);

/// The optional trailing argument `i` of `rest`, or `default`.
fn opt(rest: &[String], i: usize, default: u64) -> anyhow::Result<u64> {
    Ok(match rest.get(i) {
        Some(v) => v.parse()?,
        None => default,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let logf = a.get(5).cloned().unwrap_or_default();
    let code = match run(&a).await {
        Ok(Ok(())) => 0,
        Ok(Err(Violation(what))) => {
            let _ = log(&logf, &format!("VIOLATION {what}"));
            3
        }
        Err(e) => {
            eprintln!("wodi-test-master: {e:#}");
            let _ = log(&logf, &format!("error {e:#}"));
            1
        }
    };
    std::process::exit(code);
}

async fn run(a: &[String]) -> anyhow::Result<Result<(), Violation>> {
    let [
        local,
        secret,
        server,
        worker,
        checkpoint,
        logf,
        cycles,
        rest @ ..,
    ] = a
    else {
        anyhow::bail!(
            "usage: wodi-test-master LOCAL SECRET SERVER WORKER CHECKPOINT LOG CYCLES [HOSTS STEPS STEP_MS]"
        );
    };
    let cycles: u64 = cycles.parse()?;
    let hosts = opt(rest, 0, 2)? as u32;
    let steps = opt(rest, 1, 4)?;
    let step_ms = opt(rest, 2, 150)?;
    let mut cfg = MasterConfig::new(PathBuf::from(worker), Vec::new(), "true", hosts);
    cfg.server = ServerCommand::Path(server.into());
    cfg.pool = Some(PoolAddr {
        local: local.clone(),
        secret_file: secret.into(),
        token_file: None,
    });
    cfg.checkpoint = Some(checkpoint.into());
    // A machine killed under a step counts as a crash of that step; the
    // kill test kills machines at random, which is not the step's fault.
    cfg.max_attempts = 1000;
    let mut master = Master::init(cfg, &"i".to_string()).await?;
    let (first, mut done) = match master.resume_point::<Vec<u64>>()? {
        Some((c, done)) => {
            let n = master.history().await?.len();
            log(logf, &format!("resume {} {n}", c.0))?;
            anyhow::ensure!(
                done == (0..=c.0).collect::<Vec<_>>(),
                "state {done:?} does not match cycle {c}"
            );
            (c.0 + 1, done)
        }
        None => (0, Vec::new()),
    };
    for c in first..cycles {
        let cycle = CycleId(c);
        log(logf, &format!("begin {c}"))?;
        master.begin_cycle(cycle, &"b")?;
        let data = format!("sleep {step_ms}");
        for s in 0..steps {
            master.send_work(StepId(s), &data)?;
        }
        let mut seen = BTreeSet::new();
        while (seen.len() as u64) < steps {
            match master.recv_result::<String>().await? {
                StepOutcome::Failed(s, why) => {
                    return Ok(Err(Violation(format!("cycle {c}: {s} failed: {why}"))));
                }
                StepOutcome::Done(s, r) => {
                    let want = format!("i|{cycle}:b|{s}|{data}");
                    if r != want {
                        return Ok(Err(Violation(format!(
                            "cycle {c}: {s} answered {r:?}, not {want:?}"
                        ))));
                    }
                    if !seen.insert(s.0) {
                        return Ok(Err(Violation(format!("cycle {c}: {s} answered twice"))));
                    }
                }
            }
        }
        master.end_cycle(cycle, &())?;
        done.push(c);
        master.checkpoint(cycle, &done).await?;
        log(logf, &format!("done {c}"))?;
    }
    master.complete().await?;
    log(logf, "complete")?;
    Ok(Ok(()))
}
