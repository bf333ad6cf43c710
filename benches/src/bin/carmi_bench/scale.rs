//! The `scale` benchmark: one real `carmi-global` against a [`Fleet`] of
//! thousands of machines (real TLS, handshake, daemon tokens, heartbeats at
//! the daemon's default period), with jobs started by hand that add and
//! delete hosts and a queue of submitted jobs that can never run.
//!
//! For each pool size it reports the global RM's memory per machine, the
//! whole pool's `status` (p50/p99, end to end: connect, handshake, answer),
//! request-to-event time (`AddHosts` to `HostsAdded`, p50/p99), how long the
//! global RM takes to notice 10% of the machines going silent at once, the
//! journal's size and the restart time (SIGKILL, then until `carmi q`
//! answers with every job).

use std::time::{Duration, Instant};

use carmi_api::admin::{pool_status, request, request_with_payload};
use carmi_api::exe::sha256_hex;
use carmi_api::msg::{Event, ExecutableRef, FromGlobal, Request, SubmitRequest, ToGlobal};
use carmi_testkit::{Fleet, FleetOptions, Pool, PoolOptions};

use super::{Latency, Result, load_average, millis, print_command};

/// What one pool size is run with.
#[derive(Clone, Debug)]
pub(super) struct ScaleRun {
    pub machines: usize,
    pub slots: u32,
    /// Jobs started by hand, each adding and deleting one host per round.
    pub jobs: usize,
    /// Add/delete rounds per job.
    pub rounds: usize,
    /// Submitted jobs that wait in the queue (their master can never be placed).
    pub queued: usize,
    /// `status` calls timed.
    pub statuses: usize,
    /// The global RM's heartbeat period (its default is 1000 ms).
    pub heartbeat_ms: u64,
    /// Relays the machines connect through (0: straight to the global RM).
    pub relays: usize,
}

/// What one pool size measured.
pub(super) struct ScaleResult {
    run: ScaleRun,
    register: Duration,
    rss_base_mb: f64,
    rss_mb: f64,
    status: Latency,
    request: Latency,
    notice: Duration,
    journal_bytes: u64,
    restart: Duration,
    submit: Duration,
    /// The most open files of any process of the pool (global RM, relays,
    /// fleet workers, this one), and which.
    max_files: (usize, String),
    /// The largest relay's resident memory.
    relay_rss_mb: f64,
}

/// Missed heartbeats before a machine is lost, as deployed by default.
const MISSED: u32 = 3;
/// How long any one wait may take.
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs every size and prints the table.
pub(super) fn run_scale(rt: &tokio::runtime::Runtime, runs: &[ScaleRun]) -> Result<()> {
    print_command("scale");
    // The machines live in worker processes (`scale_fleet.rs`): this one
    // holds only the jobs' machines, and the global RM what connects to it.
    let direct = runs.iter().filter(|r| r.relays == 0).map(|r| r.machines);
    raise_fd_limit(direct.max().unwrap_or(0).min(19_000) as u64 + 1_000)?;
    let mut results = Vec::new();
    let mut failed = None;
    for run in runs {
        eprintln!("scale: {} machines ...", run.machines);
        let r = match scale_run(rt, run) {
            Ok(r) => r,
            Err(e) => {
                // The sizes done so far are still printed.
                failed = Some(format!("{} machines: {e}", run.machines));
                break;
            }
        };
        eprintln!(
            "scale: {} machines: RSS {:.0} MB, status p50 {} ms",
            run.machines,
            r.rss_mb,
            millis(r.status.median)
        );
        results.push(r);
    }
    println!("Load average at the end: {}\n", load_average());
    println!(
        "| machines x slots | relays | register all (s) | global RSS (MB) | RSS per machine (KiB) | relay RSS (MB) | most open files (process) | `carmi status` p50 / p99 (ms) | AddHosts to HostsAdded p50 / p99 (ms) | notice 10% silent (s) | submit queue (s) | journal (MB) | restart (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        let per_machine = (r.rss_mb - r.rss_base_mb).max(0.0) * 1024.0 / r.run.machines as f64;
        println!(
            "| {} x {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {} ({}) | {} / {} | {} / {} | {:.1} | {:.1} | {:.1} | {:.2} |",
            r.run.machines,
            r.run.slots,
            r.run.relays,
            r.register.as_secs_f64(),
            r.rss_mb,
            per_machine,
            r.relay_rss_mb,
            r.max_files.0,
            r.max_files.1,
            millis(r.status.median),
            millis(r.status.p99),
            millis(r.request.median),
            millis(r.request.p99),
            r.notice.as_secs_f64(),
            r.submit.as_secs_f64(),
            r.journal_bytes as f64 / 1e6,
            r.restart.as_secs_f64(),
        );
    }
    if let Some(r) = results.first() {
        println!(
            "\n{} hand-started jobs x {} add/delete rounds, {} queued jobs, {} status calls per size; heartbeat {} ms, lost after {MISSED} missed.\n",
            r.run.jobs, r.run.rounds, r.run.queued, r.run.statuses, r.run.heartbeat_ms
        );
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// One pool size, from a fresh global RM to its restart.
fn scale_run(rt: &tokio::runtime::Runtime, run: &ScaleRun) -> Result<ScaleResult> {
    let options = PoolOptions {
        heartbeat_ms: run.heartbeat_ms,
        missed_heartbeats: MISSED,
        // The dashboard runs, as in a real pool: its snapshot of the whole
        // pool and queue is a router step too.
        global_args: vec![
            "--max-connections".into(),
            (run.machines + 2_000).to_string(),
            "--http".into(),
            "127.0.0.1:0".into(),
        ],
        ..PoolOptions::default()
    };
    let mut pool = Pool::start_with(&format!("scale-{}", run.machines), run.slots, &[], options);
    let global = global_pid(&pool)?;
    let rss_base_mb = rss_mb(global)?;
    let result = measure(rt, run, &mut pool, global, rss_base_mb);
    // Kept, for where the time went (timestamps of every step).
    let kept = std::env::temp_dir().join(format!("carmi-scale-{}-global.log", run.machines));
    let _ = std::fs::copy(pool.dir.join("global.log"), &kept);
    eprintln!("scale: the global RM's log is kept in {}", kept.display());
    result
}

/// [`scale_run`]'s measurements on its pool.
fn measure(
    rt: &tokio::runtime::Runtime,
    run: &ScaleRun,
    pool: &mut Pool,
    global: u32,
    rss_base_mb: f64,
) -> Result<ScaleResult> {
    let bare = pool.secret.clone().with_token(None);
    let fleet_options = FleetOptions {
        machines: run.jobs,
        slots: run.slots,
        ..FleetOptions::default()
    };
    let t = Instant::now();
    let spread = super::scale_fleet::Spread::start(pool, run)?;
    let fleet = rt.block_on(Fleet::start(
        &spread.addr(pool),
        &bare,
        &pool.key,
        &fleet_options,
    ))?;
    let register = t.elapsed();
    let t = Instant::now();
    rt.block_on(submit_queue(pool, run.queued))?;
    let submit = t.elapsed();
    let request = rt.block_on(add_and_delete(&fleet, run))?;
    let status = rt.block_on(statuses(pool, run))?;
    hold_for_profiling(pool);
    let relay_rss_mb = (spread.relays.iter())
        .map(|r| rss_mb(r.pid()).unwrap_or(0.0))
        .fold(0.0, f64::max);
    let rss_mb = rss_mb(global)?;
    let max_files = most_open_files(global, &spread);
    let notice = rt.block_on(notice_silence(pool, &spread, run))?;
    let journal_bytes = dir_bytes(&pool.dir.join("global-state"));
    let t = Instant::now();
    pool.restart_global();
    rt.block_on(queue_answers(pool, run.jobs + run.queued))?;
    let restart = t.elapsed();
    rt.block_on(fleet.stop());
    drop(spread);
    Ok(ScaleResult {
        run: run.clone(),
        register,
        rss_base_mb,
        rss_mb,
        status,
        request,
        notice,
        journal_bytes,
        restart,
        submit,
        max_files,
        relay_rss_mb,
    })
}

/// The process of the pool with the most open files, and how many.
fn most_open_files(global: u32, spread: &super::scale_fleet::Spread) -> (usize, String) {
    use super::scale_fleet::open_files;
    let mut all = spread.pids();
    all.push(("global RM".into(), global));
    all.push(("benchmark".into(), std::process::id()));
    all.into_iter()
        .map(|(what, pid)| (open_files(pid), what))
        .max()
        .unwrap_or_default()
}

/// Submits `n` jobs whose master no machine matches, 16 at a time.
async fn submit_queue(pool: &Pool, n: usize) -> Result<()> {
    let bytes = b"#!/bin/sh\nexit 0\n".to_vec();
    let exe = ExecutableRef {
        name: "master".into(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    let spec = carmi_api::submit::parse(
        "queued.sub",
        "executable = master\nrequest_memory = 1000000\nmaster_requirements = Machine == \"nowhere\"\nqueue\n",
    )
    .map_err(|e| e.to_string())?;
    let submit = |i: usize| {
        let msg = ToGlobal::Submit(Box::new(SubmitRequest {
            owner: format!("user{}", i % 10),
            machine: "nowhere".into(),
            executable: exe.clone(),
            spec: spec.copy(0),
            submitted_unix: carmi_api::token::now_unix(),
            anywhere: true,
            procs: Vec::new(),
            max_materialize: None,
            max_idle: None,
        }));
        let (addr, secret, exe, bytes) = (
            pool.global_addr.clone(),
            pool.secret.clone(),
            exe.clone(),
            bytes.clone(),
        );
        async move {
            let uploads: Vec<(&ExecutableRef, &[u8])> = if i == 0 {
                vec![(&exe, bytes.as_slice())]
            } else {
                vec![]
            };
            match request_with_payload(&addr, &secret, &uploads, msg).await {
                Ok((FromGlobal::Submitted { .. }, _)) => Ok(()),
                Ok((other, _)) => Err(format!("submit {i}: {other:?}")),
                Err(e) => Err(format!("submit {i}: {e}")),
            }
        }
    };
    if n == 0 {
        return Ok(());
    }
    submit(0).await?;
    let mut set = tokio::task::JoinSet::new();
    for i in 1..n {
        if set.len() >= 16
            && let Some(r) = set.join_next().await
        {
            r??;
        }
        set.spawn(submit(i));
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// `run.jobs` applications, one per machine, each defining a class and then
/// adding one host and deleting it `run.rounds` times; the times from each
/// `AddHosts` to its `HostsAdded`.
async fn add_and_delete(fleet: &Fleet, run: &ScaleRun) -> Result<Latency> {
    let mut set = tokio::task::JoinSet::new();
    let mut apps = Vec::new();
    for i in 0..run.jobs.min(fleet.len()) {
        apps.push(fleet.attach(i, PATIENCE).await?);
    }
    for mut app in apps {
        let rounds = run.rounds;
        set.spawn(async move {
            let define = Request::DefineClass {
                name: "any".into(),
                expression: "true".into(),
                rank: None,
                replace: false,
            };
            app.request(define)?;
            match app
                .event(PATIENCE)
                .await
                .map_err(|e| format!("DefineClass: {e}"))?
            {
                Event::Done { .. } => {}
                other => return Err(format!("DefineClass: {other:?}")),
            }
            let mut times = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let add = Request::AddHosts {
                    class: "any".into(),
                    count: 1,
                    increment: 1,
                };
                let t = Instant::now();
                app.request(add)?;
                let hosts = match app
                    .event(PATIENCE)
                    .await
                    .map_err(|e| format!("AddHosts: {e}"))?
                {
                    Event::HostsAdded { hosts, .. } => hosts,
                    other => return Err(format!("AddHosts: {other:?}")),
                };
                times.push(t.elapsed());
                app.request(Request::DelHosts {
                    hosts: hosts.iter().map(|h| h.host).collect(),
                })?;
                match app
                    .event(PATIENCE)
                    .await
                    .map_err(|e| format!("DelHosts: {e}"))?
                {
                    Event::Done { .. } => {}
                    other => return Err(format!("DelHosts: {other:?}")),
                }
            }
            Ok::<_, String>(times)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r??);
    }
    if all.is_empty() {
        return Err("no request was timed".into());
    }
    Ok(Latency::of(&all))
}

/// With `CARMI_SCALE_HOLD_S=N` in the environment, keeps the whole pool up
/// N seconds after the status calls and says how to reach it: time for a
/// profiler (`perf record -p`) or a hand-run `carmi` at full size.
fn hold_for_profiling(pool: &Pool) {
    let Some(secs) = std::env::var("CARMI_SCALE_HOLD_S")
        .ok()
        .and_then(|s| s.parse().ok())
    else {
        return;
    };
    let env = pool.carmi();
    let env: Vec<String> = (env.get_envs())
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?)))
        .collect();
    eprintln!(
        "scale: holding the pool {secs} s (global RM pid {}): {}",
        global_pid(pool).unwrap_or(0),
        env.join(" ")
    );
    std::thread::sleep(Duration::from_secs(secs));
}

/// Times `run.statuses` whole-pool `carmi status --json` runs, one after
/// the other: the real command in its own process, end to end (start,
/// connect, handshake, answer, decode, print), so that the fleet's load on
/// this process does not count.
async fn statuses(pool: &Pool, run: &ScaleRun) -> Result<Latency> {
    let mut times = Vec::new();
    for _ in 0..run.statuses.max(1) {
        let mut cmd = pool.carmi();
        cmd.args(["status", "--json"]);
        let t = Instant::now();
        let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
        times.push(t.elapsed());
        if !out.status.success() {
            return Err(format!(
                "carmi status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let machines: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let listed = machines.as_array().map_or(0, |m| m.len());
        if listed != run.machines {
            return Err(format!("status listed {listed} machines of {}", run.machines).into());
        }
    }
    Ok(Latency::of(&times))
}

/// Silences a tenth of the machines at once (a fleet worker stopped);
/// how long until `status` no longer lists them.
async fn notice_silence(
    pool: &Pool,
    spread: &super::scale_fleet::Spread,
    run: &ScaleRun,
) -> Result<Duration> {
    let t = Instant::now();
    let silent = spread.silence_one();
    loop {
        let listed = pool_status(&pool.global_addr, &pool.secret).await?.len();
        if listed <= run.machines - silent {
            return Ok(t.elapsed());
        }
        if t.elapsed() > PATIENCE {
            return Err(format!("{listed} machines still listed after {PATIENCE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `carmi q` answers with `jobs` jobs (after a restart).
async fn queue_answers(pool: &Pool, jobs: usize) -> Result<()> {
    let t = Instant::now();
    loop {
        if let Ok(FromGlobal::Queue(q)) =
            request(&pool.global_addr, &pool.secret, None, ToGlobal::Queue).await
            && q.len() >= jobs
        {
            return Ok(());
        }
        if t.elapsed() > PATIENCE {
            return Err(format!("the queue did not come back within {PATIENCE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The global RM's process id, from its pid file or `/proc`.
fn global_pid(pool: &Pool) -> Result<u32> {
    let state = pool.dir.join("global-state");
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline);
        if text.contains("carmi-global") && text.contains(&*state.to_string_lossy()) {
            return Ok(pid);
        }
    }
    Err("the global RM's process was not found".into())
}

/// Resident memory of `pid`, in MB.
fn rss_mb(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmRSS")?;
    Ok(kb / 1024.0)
}

/// Bytes of the files directly in `dir` (the journal and its companions).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Raises the open-file limit (inherited by the global RM) to `want`, or
/// says why it cannot.
pub(super) fn raise_fd_limit(want: u64) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && {
            lim.rlim_cur = lim.rlim_cur.max(want.min(lim.rlim_max));
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
        }
    };
    if !ok || lim.rlim_cur < want {
        return Err(format!(
            "the scale benchmark needs {want} open files; the hard limit is {}",
            lim.rlim_max
        )
        .into());
    }
    Ok(())
}
