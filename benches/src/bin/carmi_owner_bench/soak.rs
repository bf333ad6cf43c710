//! `carmi-owner-bench soak [CYCLES] [--machines M] [--period-ms P] [--grace-ms G]
//! [--step-ms S] [--every N] [--long-every K]`: owner arrive/leave cycles on M one-slot
//! machines of a real pool (a global RM and M local RMs) WHILE a WoDi run
//! keeps every machine's worker busy with steps of S ms.
//!
//! Every machine has its own owner, who arrives and leaves once per period
//! (the machines out of phase); each arrival waits until every process of
//! that machine is stopped (`T`), each leave until none is; every K-th
//! cycle of an owner stays four half periods. WoDi sees the suspensions: a
//! worker suspended longer than its grace G loses its steps,
//! which are sent again elsewhere, and its host is given back (the
//! recommended policies) and later granted again, so the soak also starts
//! and kills workers. Every N cycles it prints the cycles done, their rate,
//! the steps delivered, and the daemons' memory, descriptors and journal.
//!
//! At the end it checks, and fails saying which, that every step sent was
//! delivered exactly once with its own result, that no process of the run
//! is left, that the daemons' memory and descriptors are back near where
//! they were after warm-up, and that no daemon logged an error; it lists the
//! logs' warnings by kind. The last line, `soak-result {json}`, is what
//! `tests/soak.rs` reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::control::OwnerLink;
use carmi_api::msg::OwnerEvent;
use carmi_testkit::{Pool, PoolOptions};
use wodi::StepId;
use wodi::master::{Master, MasterConfig, PoolAddr, StepOutcome};

use super::Result;
use super::soak_proc::{children, complaints, count_lines, daemons, footprint, leftovers, state};

/// The soak's settings (see the module's documentation).
#[derive(Clone, Debug)]
pub(super) struct SoakArgs {
    cycles: u64,
    machines: usize,
    period_ms: u64,
    grace_ms: u64,
    step_ms: u64,
    every: u64,
    long_every: u64,
}

impl SoakArgs {
    /// Parses the arguments after `soak`.
    pub(super) fn parse(args: &[String]) -> Result<SoakArgs> {
        let mut a = SoakArgs {
            cycles: 100_000,
            machines: 10,
            period_ms: 400,
            grace_ms: 300,
            step_ms: 20,
            every: 0,
            long_every: 10,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| -> Result<u64> {
                let v = it.next().ok_or_else(|| format!("{name} wants a number"))?;
                v.parse().map_err(|e| format!("{name} {v:?}: {e}").into())
            };
            match arg.as_str() {
                "--machines" => a.machines = value("--machines")? as usize,
                "--period-ms" => a.period_ms = value("--period-ms")?,
                "--grace-ms" => a.grace_ms = value("--grace-ms")?,
                "--step-ms" => a.step_ms = value("--step-ms")?,
                "--every" => a.every = value("--every")?,
                "--long-every" => a.long_every = value("--long-every")?,
                n => {
                    a.cycles = n
                        .parse()
                        .map_err(|e| format!("soak: {n:?} is neither an option nor a count: {e}"))?
                }
            }
        }
        if a.machines == 0 || a.cycles == 0 || a.period_ms < 20 {
            return Err("soak wants at least one machine, one cycle and a period of 20 ms".into());
        }
        if a.every == 0 {
            a.every = (a.cycles / 20).max(1);
        }
        Ok(a)
    }
}

/// The worker's answer to a step: its first 8 bytes (the step's number),
/// after sleeping the milliseconds the next 4 bytes say.
pub(super) fn work(data: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let ms = data
        .get(8..12)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or("a soak step has 12 bytes")?;
    std::thread::sleep(Duration::from_millis(ms.into()));
    Ok(data[..8].to_vec())
}

/// One machine's owner: arrive, wait until the machine's processes are all
/// stopped, stay half a period (every `long_every`-th cycle four half
/// periods, past the workers' grace, so that WoDi sends their steps again
/// and gives the host back), leave, wait until none is stopped, stay the
/// rest of the period; until `done` cycles were claimed by all owners.
async fn owner(
    pool_addr: String,
    secret: carmi_api::handshake::Secret,
    local: u32,
    a: SoakArgs,
    offset: Duration,
    done: Arc<AtomicU64>,
) -> Result<()> {
    let mut link = OwnerLink::connect(&pool_addr, &secret).await?;
    let half = Duration::from_millis(a.period_ms / 2);
    tokio::time::sleep(offset).await;
    for mine in 1u64.. {
        let cycle = done.fetch_add(1, Ordering::SeqCst) + 1;
        if cycle > a.cycles {
            done.fetch_sub(1, Ordering::SeqCst);
            return Ok(());
        }
        let t = Instant::now();
        link.send(OwnerEvent::Arrive).await?;
        wait_children(local, |s| matches!(s, Some('T' | 'Z') | None))
            .await
            .map_err(|e| format!("cycle {cycle}, owner arrived: {e}"))?;
        let away = if a.long_every > 0 && mine % a.long_every == 0 {
            half * 4
        } else {
            half
        };
        tokio::time::sleep(away.saturating_sub(t.elapsed())).await;
        let t = Instant::now();
        link.send(OwnerEvent::Leave).await?;
        wait_children(local, |s| s != Some('T'))
            .await
            .map_err(|e| format!("cycle {cycle}, owner left: {e}"))?;
        tokio::time::sleep(half.saturating_sub(t.elapsed())).await;
    }
    Ok(())
}

/// Waits until every child of the local RM `local` is in a state `ok`
/// accepts; 10 s at most.
async fn wait_children(local: u32, ok: impl Fn(Option<char>) -> bool) -> Result<()> {
    let t = Instant::now();
    loop {
        let kids = children(local);
        if kids.iter().all(|&p| ok(state(p))) {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(10) {
            let states: Vec<_> = kids.iter().map(|&p| (p, state(p))).collect();
            return Err(format!("processes did not change state within 10 s: {states:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The size of the file at `path` (the global RM's journal), 0 if absent.
fn file_bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The daemons' memory (KiB) and descriptors: the global RM's, and each
/// local RM's in machine order.
type Footprints = (Option<(u64, usize)>, Vec<Option<(u64, usize)>>);

fn footprints(global: u32, locals: &[u32]) -> Footprints {
    (
        footprint(global),
        locals.iter().map(|&p| footprint(p)).collect(),
    )
}

/// The local RMs' memory summed (MB) and descriptors summed.
fn locals_sum(f: &Footprints) -> (f64, usize) {
    let rss: u64 = f.1.iter().flatten().map(|x| x.0).sum();
    let fds: usize = f.1.iter().flatten().map(|x| x.1).sum();
    (rss as f64 / 1024.0, fds)
}

/// What the run delivered: by step, how many times.
struct Tally {
    sent: u64,
    seen: HashMap<u64, u32>,
    wrong: u64,
    failed: Vec<String>,
    last: Instant,
}

impl Tally {
    fn take(&mut self, outcome: StepOutcome<Bytes>) {
        self.last = Instant::now();
        match outcome {
            StepOutcome::Done(StepId(s), r) => {
                if r.as_ref() != s.to_le_bytes() {
                    self.wrong += 1;
                }
                *self.seen.entry(s).or_insert(0) += 1;
            }
            StepOutcome::Failed(step, why) => self.failed.push(format!("{step}: {why}")),
        }
    }

    fn delivered(&self) -> u64 {
        self.seen.values().map(|&n| u64::from(n)).sum()
    }

    /// Steps sent and not answered yet (a step delivered twice must not
    /// make this wrap: the end reports it).
    fn in_flight(&self) -> u64 {
        let answered = self.seen.len() as u64 + self.failed.len() as u64;
        self.sent.saturating_sub(answered)
    }
}

pub(super) async fn soak(a: SoakArgs) -> Result<()> {
    // CONTINUE 5 policy minutes (50 ms) after the owner leaves; never preempt.
    let options = PoolOptions {
        local_config: "[policy]\nminute = 0.01\npreempt = \"false\"\n".into(),
        heartbeat_ms: 1000,
        missed_heartbeats: 10,
        ..PoolOptions::default()
    };
    let machines = vec![vec![]; a.machines];
    let pool = tokio::task::block_in_place(|| {
        let pool = Pool::start_with("owner-soak", 1, &machines, options);
        pool.wait_registered();
        pool
    });
    let result = run(&a, &pool).await;
    if result.is_err() {
        eprintln!("{}", pool.logs());
    }
    result
}

/// The pool's daemons, by process id: the global RM and the local RMs in
/// machine order.
struct Daemons {
    global: u32,
    locals: Vec<u32>,
}

impl Daemons {
    fn of(pool: &Pool, machines: usize) -> Result<Daemons> {
        let (global, by_name) = daemons(&pool.dir);
        let global = global.ok_or("no global RM")?;
        let locals: Vec<u32> = (0..machines)
            .map(|i| by_name.get(&format!("m{i}")).copied())
            .collect::<Option<_>>()
            .ok_or("a local RM is missing")?;
        Ok(Daemons { global, locals })
    }

    fn footprints(&self) -> Footprints {
        footprints(self.global, &self.locals)
    }
}

/// What the run measured, for the checks at its end.
struct Ended {
    tally: Tally,
    cycles: u64,
    elapsed: Duration,
    stats: wodi::Stats,
    /// The daemons' footprints and the journal's size after warm-up.
    start: Footprints,
    journal_start: u64,
}

/// Step `s` of the run: its number, then how long the worker sleeps.
fn step_data(a: &SoakArgs, s: u64) -> Bytes {
    let mut d = s.to_le_bytes().to_vec();
    d.extend_from_slice(&(a.step_ms as u32).to_le_bytes());
    Bytes::from(d)
}

/// The global RM's journal.
fn journal(pool: &Pool) -> std::path::PathBuf {
    pool.dir.join("global-state").join("journal.log")
}

async fn run(a: &SoakArgs, pool: &Pool) -> Result<()> {
    let daemons = Daemons::of(pool, a.machines)?;
    let mut master = start_master(a, pool).await?;
    let mut tally = Tally {
        sent: 0,
        seen: HashMap::new(),
        wrong: 0,
        failed: Vec::new(),
        last: Instant::now(),
    };
    // Warm-up: every worker joined and answered before the owners start.
    let window = a.machines as u64 * 4;
    while tally.sent < window {
        master.send_work_raw(StepId(tally.sent), step_data(a, tally.sent));
        tally.sent += 1;
    }
    drain(
        &mut master,
        &mut tally,
        "warm-up: no step answered within 120 s",
    )
    .await?;
    let start = daemons.footprints();
    let journal_start = file_bytes(&journal(pool));
    print_header(a);
    let done = Arc::new(AtomicU64::new(0));
    let owners = spawn_owners(a, pool, &daemons.locals, &done);
    let t0 = Instant::now();
    churn(a, pool, &daemons, &mut master, &mut tally, owners, &done).await?;
    let cycles = done.load(Ordering::SeqCst);
    let elapsed = t0.elapsed();
    // Every step sent comes back before the run ends.
    let stuck = "the last steps: none answered within 120 s";
    drain(&mut master, &mut tally, stuck).await?;
    let stats = master.complete().await?;
    let ended = Ended {
        tally,
        cycles,
        elapsed,
        stats,
        start,
        journal_start,
    };
    finish(a, pool, &daemons, &ended).await
}

/// A WoDi master of one worker per machine of `pool`, this executable's
/// `--worker`, with the recommended policies and a grace of `grace_ms`.
async fn start_master(a: &SoakArgs, pool: &Pool) -> Result<Master> {
    let mut cfg = MasterConfig::new(
        std::env::current_exe()?,
        vec!["--worker".into()],
        "true",
        a.machines as u32,
    );
    cfg.pool = Some(PoolAddr {
        local: pool.locals[0].app_addr.clone(),
        secret_file: pool.secret_path.clone(),
        token_file: Some(pool.admin_token.clone()),
    });
    cfg.prefetch = 2;
    cfg.suspend_timeout = Duration::from_millis(a.grace_ms);
    cfg.learn_from_wall = true;
    Ok(Master::init_raw(cfg, Bytes::new()).await?)
}

/// Takes outcomes until every step sent was answered; fails with
/// `stuck` when none comes within 120 s.
async fn drain(master: &mut Master, tally: &mut Tally, stuck: &'static str) -> Result<()> {
    while tally.in_flight() > 0 {
        let outcome = tokio::time::timeout(Duration::from_secs(120), master.recv_result_raw())
            .await
            .map_err(|_| stuck)??;
        tally.take(outcome);
    }
    Ok(())
}

/// The command line and the progress table's header.
fn print_header(a: &SoakArgs) {
    println!(
        "Command: `carmi-owner-bench soak {} --machines {} --period-ms {} --grace-ms {} --step-ms {} \
         --long-every {}` (1 slot per machine, a WoDi worker on each)\n",
        a.cycles, a.machines, a.period_ms, a.grace_ms, a.step_ms, a.long_every
    );
    println!(
        "| cycles | elapsed (s) | cycles/s | steps delivered | global RSS (MB) / fds | locals' RSS (MB) / fds, summed | journal (KB) |"
    );
    println!("|---|---|---|---|---|---|---|");
}

/// One owner task per machine, out of phase over a period.
fn spawn_owners(
    a: &SoakArgs,
    pool: &Pool,
    locals: &[u32],
    done: &Arc<AtomicU64>,
) -> tokio::task::JoinSet<Result<()>> {
    let mut owners = tokio::task::JoinSet::new();
    for (i, &local) in locals.iter().enumerate() {
        let offset = Duration::from_millis(a.period_ms * i as u64 / a.machines as u64);
        owners.spawn(owner(
            pool.locals[i].app_addr.clone(),
            pool.secret.clone(),
            local,
            a.clone(),
            offset,
            done.clone(),
        ));
    }
    owners
}

/// Keeps every worker busy while the owners come and go, printing a row
/// every `every` cycles, until the owners are done; fails if an owner does
/// or if no step comes back for 120 s.
async fn churn(
    a: &SoakArgs,
    pool: &Pool,
    daemons: &Daemons,
    master: &mut Master,
    tally: &mut Tally,
    mut owners: tokio::task::JoinSet<Result<()>>,
    done: &AtomicU64,
) -> Result<()> {
    let window = a.machines as u64 * 4;
    let t0 = Instant::now();
    let (mut next_report, mut last_report) = (a.every, (Instant::now(), 0u64));
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let cycles = done.load(Ordering::SeqCst);
        let owners_done = owners.is_empty();
        while !owners_done && tally.in_flight() < window {
            master.send_work_raw(StepId(tally.sent), step_data(a, tally.sent));
            tally.sent += 1;
        }
        if cycles >= next_report || (owners_done && last_report.1 < cycles) {
            let f = daemons.footprints();
            let (g, l) = (f.0.unwrap_or_default(), locals_sum(&f));
            let rate = (cycles - last_report.1) as f64 / last_report.0.elapsed().as_secs_f64();
            println!(
                "| {cycles} | {:.0} | {rate:.1} | {} | {:.1} / {} | {:.1} / {} | {} |",
                t0.elapsed().as_secs_f64(),
                tally.delivered(),
                g.0 as f64 / 1024.0,
                g.1,
                l.0,
                l.1,
                file_bytes(&journal(pool)) / 1024
            );
            last_report = (Instant::now(), cycles);
            next_report = (cycles / a.every + 1) * a.every;
        }
        if owners_done {
            return Ok(());
        }
        if tally.last.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "stuck: no step answered for 120 s at cycle {cycles} ({} sent, {} delivered)",
                tally.sent,
                tally.delivered()
            )
            .into());
        }
        tokio::select! {
            outcome = master.recv_result_raw() => tally.take(outcome?),
            joined = owners.join_next(), if !owners.is_empty() => {
                if let Some(r) = joined {
                    r.map_err(|e| format!("an owner task: {e}"))??;
                }
            }
            _ = tick.tick() => {}
        }
    }
}

/// What the checks at the end found besides the steps.
struct After {
    /// Processes of the run still there.
    left: Vec<(u32, String)>,
    end: Footprints,
    journal_end: u64,
    /// Warnings and errors in the daemons' logs, by kind.
    complaints: std::collections::BTreeMap<String, usize>,
    /// Claims suspended, worker processes started (from the local RMs' logs).
    suspended: usize,
    started: usize,
}

/// The checks after the run; prints the summary and `soak-result {json}`.
async fn finish(a: &SoakArgs, pool: &Pool, daemons: &Daemons, run: &Ended) -> Result<()> {
    let after = look_after(pool, daemons).await;
    let tally = &run.tally;
    let twice = tally.seen.values().filter(|&&n| n > 1).count();
    let missing = tally
        .sent
        .saturating_sub(tally.seen.len() as u64 + tally.failed.len() as u64);
    // No daemon logs an error over owner churn; warnings are listed below.
    let errors: usize = after
        .complaints
        .iter()
        .filter(|(k, _)| k.contains("ERROR"))
        .map(|(_, n)| n)
        .sum();
    let problems = problems(run, &after, twice, missing, errors);
    let (gs, ge) = (
        run.start.0.unwrap_or_default(),
        after.end.0.unwrap_or_default(),
    );
    print_summary(a, run, &after);
    let result = serde_json::json!({
        "cycles": run.cycles,
        "machines": a.machines,
        "elapsed_s": run.elapsed.as_secs_f64(),
        "steps_sent": tally.sent,
        "steps_delivered": tally.delivered(),
        "steps_twice": twice,
        "steps_missing": missing,
        "steps_wrong": tally.wrong,
        "steps_failed": tally.failed.len(),
        "step_copies": run.stats.step_copies,
        "hosts_added": run.stats.hosts.added,
        "processes_left": after.left.len(),
        "suspensions": after.suspended,
        "processes_started": after.started,
        "global_start": gs, "global_end": ge,
        "journal_start": run.journal_start, "journal_end": after.journal_end,
        "errors": errors,
    });
    println!("soak-result {result}");
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; ").into())
    }
}

/// Looks at the pool once the run ended: the processes left (after the
/// local RMs had a moment to kill the workers), the daemons' footprints,
/// the journal, the logs.
async fn look_after(pool: &Pool, daemons: &Daemons) -> After {
    let mut daemon_pids = daemons.locals.clone();
    daemon_pids.push(daemons.global);
    // The local RMs kill a finished run's workers; give them a moment.
    let t = Instant::now();
    let mut left = leftovers(&pool.dir, &daemon_pids);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = leftovers(&pool.dir, &daemon_pids);
    }
    // Memory settles (allocators give pages back lazily) only so far: a
    // moment for the last connections to close.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = daemons.footprints();
    let journal_end = file_bytes(&journal(pool));
    let mut names = vec!["global".to_string()];
    names.extend(pool.locals.iter().map(|l| l.name.clone()));
    let complaints = complaints(&pool.dir, &names);
    // The cycles that found a job's process on the machine (a local RM
    // logs each claim it suspends), and the processes started.
    let suspended = count_lines(&pool.dir, &names[1..], "to=Claimed/Suspended");
    let started = count_lines(&pool.dir, &names[1..], "process started");
    After {
        left,
        end,
        journal_end,
        complaints,
        suspended,
        started,
    }
}

/// What went wrong, one sentence each: steps not delivered exactly once
/// with their own result, processes left, a daemon grown, errors logged.
fn problems(run: &Ended, after: &After, twice: usize, missing: u64, errors: usize) -> Vec<String> {
    let (tally, start, end) = (&run.tally, &run.start, &after.end);
    let grew = |now: Option<(u64, usize)>, then: Option<(u64, usize)>| match (now, then) {
        (Some(n), Some(t)) => n.0 > 2 * t.0 + 4096 || n.1 > t.1 + 16,
        _ => true,
    };
    let mut problems = Vec::new();
    if twice > 0 || missing > 0 || tally.wrong > 0 || !tally.failed.is_empty() {
        problems.push(format!(
            "steps: {twice} delivered more than once, {missing} never, {} with another's result, {} failed {:?}",
            tally.wrong,
            tally.failed.len(),
            tally.failed.iter().take(3).collect::<Vec<_>>()
        ));
    }
    if !after.left.is_empty() {
        problems.push(format!("processes left: {:?}", after.left));
    }
    if grew(end.0, start.0) || start.1.iter().zip(&end.1).any(|(s, e)| grew(*e, *s)) {
        problems.push(format!("a daemon grew: from {start:?} to {end:?}"));
    }
    if errors > 0 {
        problems.push(format!(
            "{errors} error lines in the daemons' logs (listed above)"
        ));
    }
    problems
}

/// The run in sentences, then the logs' warnings and errors by kind.
fn print_summary(a: &SoakArgs, run: &Ended, after: &After) {
    let (tally, stats, elapsed, cycles) = (&run.tally, &run.stats, run.elapsed, run.cycles);
    let (gs, ge) = (
        run.start.0.unwrap_or_default(),
        after.end.0.unwrap_or_default(),
    );
    let (ls, le) = (locals_sum(&run.start), locals_sum(&after.end));
    println!(
        "\n{cycles} owner cycles on {} machines in {:.0} s ({:.1}/s); {} steps sent, {} delivered \
         ({} copies computed), {} hosts granted, {} lost.",
        a.machines,
        elapsed.as_secs_f64(),
        cycles as f64 / elapsed.as_secs_f64(),
        tally.sent,
        tally.delivered(),
        stats.step_copies,
        stats.hosts.added,
        stats.hosts.lost
    );
    println!(
        "{} suspensions of a running claim (the other cycles found no process on the \
         machine); {} worker processes started.",
        after.suspended, after.started
    );
    println!(
        "global RM: {:.1} MB / {} fds after warm-up, {:.1} MB / {} fds at the end; \
         local RMs (summed): {:.1} MB / {} fds, then {:.1} MB / {} fds; journal {} KB, then {} KB.",
        gs.0 as f64 / 1024.0,
        gs.1,
        ge.0 as f64 / 1024.0,
        ge.1,
        ls.0,
        ls.1,
        le.0,
        le.1,
        run.journal_start / 1024,
        after.journal_end / 1024
    );
    println!("warnings and errors in the daemons' logs, by kind:");
    for (kind, n) in &after.complaints {
        println!("  {n:>7}  {kind}");
    }
}
