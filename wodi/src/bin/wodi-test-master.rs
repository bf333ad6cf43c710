//! A master for WoDi's checkpoint test, run as its own process so the test
//! can SIGKILL it mid-run and start it again.
//!
//! `wodi-test-master LOCAL SECRET SERVER WORKER CHECKPOINT LOG CYCLES`: runs
//! cycles of 4 steps (`sleep 150` each on the test worker) on the pool at
//! LOCAL, resuming after the checkpoint's cycle if the file exists. It
//! appends to LOG `resume C N` (resumed after cycle C with N history
//! estimates), `begin C` and `done C` (cycle C checkpointed), then `complete`.
//! Its state is the list of cycles it completed, which it checks.

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

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [local, secret, server, worker, checkpoint, logf, cycles] = a.as_slice() else {
        anyhow::bail!("usage: wodi-test-master LOCAL SECRET SERVER WORKER CHECKPOINT LOG CYCLES");
    };
    let cycles: u64 = cycles.parse()?;
    let mut cfg = MasterConfig::new(PathBuf::from(worker), Vec::new(), "true", 2);
    cfg.server = ServerCommand::Path(server.into());
    cfg.pool = Some(PoolAddr {
        local: local.clone(),
        secret_file: secret.into(),
    });
    cfg.checkpoint = Some(checkpoint.into());
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
        log(logf, &format!("begin {c}"))?;
        master.begin_cycle(CycleId(c), &"b")?;
        for s in 0..4 {
            master.send_work(StepId(s), &"sleep 150".to_string())?;
        }
        for _ in 0..4 {
            if let StepOutcome::Failed(s, why) = master.recv_result::<String>().await? {
                anyhow::bail!("{s} failed: {why}");
            }
        }
        master.end_cycle(CycleId(c), &())?;
        done.push(c);
        master.checkpoint(CycleId(c), &done).await?;
        log(logf, &format!("done {c}"))?;
    }
    master.complete().await?;
    log(logf, "complete")?;
    Ok(())
}
