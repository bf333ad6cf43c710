//! The `cluster` benchmark (issue 32): a cluster of 2,395 procs submitted
//! in one request while other users look at the pool and submit. One real
//! `carmi-global` with a [`Fleet`] of machines; the procs' masters match no
//! machine, so they all stay in the queue (the allocator's passes see every
//! materialized one). Three phases, side by side: nothing else going on;
//! during and after the big submit with every proc materialized; the same
//! with `max_materialize = 50`. Each phase times `status` (the pool's whole
//! status, end to end) and another user's one-proc submits.

use std::time::{Duration, Instant};

use carmi_api::admin::{pool_status, request_with_payload};
use carmi_api::exe::sha256_hex;
use carmi_api::msg::{ExecutableRef, FromGlobal, SubmitRequest, ToGlobal};
use carmi_api::submit::JobSpec;
use carmi_testkit::{Fleet, FleetOptions, Pool, PoolOptions};

use super::{Latency, Result, load_average, millis, print_command};

/// Samples of each kind per phase.
const SAMPLES: usize = 40;

/// What one phase measured.
struct Phase {
    name: String,
    /// The big cluster's submit, answer included.
    cluster: Option<Duration>,
    status: Latency,
    submit: Latency,
}

fn spec(arg: &str) -> Result<JobSpec> {
    let text = format!(
        "executable = master\narguments = {arg}\nmaster_requirements = Machine == \"nowhere\"\nqueue\n"
    );
    carmi_api::submit::parse("bench.sub", &text).map_err(|e| e.to_string().into())
}

fn request(owner: &str, procs: usize, max_materialize: Option<u32>) -> Result<ToGlobal> {
    Ok(ToGlobal::Submit(Box::new(SubmitRequest {
        owner: owner.into(),
        machine: "nowhere".into(),
        executable: master_exe(),
        spec: spec("0")?,
        submitted_unix: carmi_api::token::now_unix(),
        anywhere: true,
        procs: (1..procs)
            .map(|p| spec(&p.to_string()))
            .collect::<Result<_>>()?,
        max_materialize,
        max_idle: None,
    })))
}

/// A master that does nothing (the benchmarks time the global RM, not jobs).
pub(super) const MASTER: &[u8] = b"#!/bin/sh\nexit 0\n";

/// The procs' master, as the global RM names it.
pub(super) fn master_exe() -> ExecutableRef {
    ExecutableRef {
        name: "master".into(),
        sha256: sha256_hex(MASTER),
        size: MASTER.len() as u64,
    }
}

async fn submit(pool: &Pool, msg: ToGlobal) -> Result<Duration> {
    let exe = master_exe();
    let uploads = [(&exe, MASTER)];
    let t = Instant::now();
    match request_with_payload(&pool.global_addr, &pool.secret, &uploads, msg).await? {
        (FromGlobal::Submitted { .. }, _) => Ok(t.elapsed()),
        (other, _) => Err(format!("submit refused: {other:?}").into()),
    }
}

/// `SAMPLES` status calls and one-proc submits by another user, alternated.
async fn others(pool: &Pool) -> Result<(Latency, Latency)> {
    let (mut status, mut submits) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let t = Instant::now();
        pool_status(&pool.global_addr, &pool.secret).await?;
        status.push(t.elapsed());
        submits.push(submit(pool, request("bob", 1, None)?).await?);
    }
    Ok((Latency::of(&status), Latency::of(&submits)))
}

async fn phase(pool: &Pool, name: &str, big: Option<(usize, Option<u32>)>) -> Result<Phase> {
    let cluster = match big {
        Some((procs, max)) => {
            let msg = request("alice", procs, max)?;
            Some(tokio::spawn({
                let (addr, secret) = (pool.global_addr.clone(), pool.secret.clone());
                async move {
                    let t = Instant::now();
                    let exe = master_exe();
                    let uploads = [(&exe, MASTER)];
                    let r = request_with_payload(&addr, &secret, &uploads, msg).await;
                    r.map(|_| t.elapsed()).map_err(|e| e.to_string())
                }
            }))
        }
        None => None,
    };
    let (status, submit) = others(pool).await?;
    let cluster = match cluster {
        Some(task) => Some(task.await??),
        None => None,
    };
    Ok(Phase {
        name: name.into(),
        cluster,
        status,
        submit,
    })
}

/// Runs the three phases on one pool of `machines` x 4 slots and prints the table.
pub(super) fn run_cluster(
    rt: &tokio::runtime::Runtime,
    procs: usize,
    machines: usize,
) -> Result<()> {
    print_command("cluster");
    let pool = Pool::start_with("cluster-bench", 4, &[], PoolOptions::default());
    let bare = pool.secret.clone().with_token(None);
    let options = FleetOptions {
        machines,
        slots: 4,
        ..FleetOptions::default()
    };
    let fleet = rt.block_on(Fleet::start(&pool.global_addr, &bare, &pool.key, &options))?;
    let mut phases = Vec::new();
    phases.push(rt.block_on(phase(&pool, "alone", None))?);
    let all = format!("during a {procs}-proc submit, all materialized");
    phases.push(rt.block_on(phase(&pool, &all, Some((procs, None))))?);
    let fifty = format!("during a {procs}-proc submit, max_materialize = 50");
    phases.push(rt.block_on(phase(&pool, &fifty, Some((procs, Some(50)))))?);
    rt.block_on(fleet.stop());
    pool.stop_global();
    println!("Load average at the end: {}\n", load_average());
    println!(
        "| {machines} machines x 4 slots | the cluster's submit (ms) | `status` p50 / p99 (ms) | another user's submit p50 / p99 (ms) |"
    );
    println!("|---|---|---|---|");
    for p in &phases {
        println!(
            "| {} | {} | {} / {} | {} / {} |",
            p.name,
            p.cluster.map_or("-".into(), millis),
            millis(p.status.median),
            millis(p.status.p99),
            millis(p.submit.median),
            millis(p.submit.p99),
        );
    }
    println!(
        "\n{SAMPLES} `status` calls and {SAMPLES} one-proc submits (another user) per phase, alternated, started with the big submit; the procs' masters match no machine, so every materialized proc stays queued.\n"
    );
    Ok(())
}
