//! The `spawn` benchmark: `class_spawn` of a large executable on every
//! slot, split into staging and execution, repeated and summarised.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, Incoming};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, ExitStatus, SpawnTarget};
use carmi_testkit::Pool;

use carmi_testkit::Inbox;

use super::inbox::job_with_hosts;
use super::{
    EXE_SIZE, Result, SPAWN_COUNT, SPAWN_MACHINES, SPAWN_REPS, SPAWN_SLOTS, load_average, millis,
    print_command,
};

/// Timings of one run of `SPAWN_COUNT` spawns, from the first `class_spawn` call.
#[derive(Clone, Copy)]
pub(super) struct SpawnRun {
    /// Until `flush` returned: every request, and the upload if there was
    /// one, handed to the socket to the local RM.
    written: Duration,
    first_started: Duration,
    all_started: Duration,
    all_exited: Duration,
}

/// Writes the filler script ([`carmi_testkit::write_executable`]) and checks
/// that it runs and exits at once.
pub(super) fn write_executable(path: &Path, size: usize, seed: u64) -> Result<()> {
    carmi_testkit::write_executable(path, size, seed)?;
    // It must run, and quickly, or the runs would time the script, not CARMI.
    let t = Instant::now();
    let status = Command::new(path).status()?;
    if !status.success() || t.elapsed() > Duration::from_millis(200) {
        return Err(format!(
            "{} does not exit at once ({status}, {:?})",
            path.display(),
            t.elapsed()
        )
        .into());
    }
    Ok(())
}

/// Starts `SPAWN_COUNT` processes of `exe` on class `any` and times them
/// until all have exited (successfully).
pub(super) async fn spawn_run(carmi: &Carmi, inbox: &mut Inbox, exe: &Path) -> Result<SpawnRun> {
    let t0 = Instant::now();
    let requests: Vec<RequestId> = (0..SPAWN_COUNT)
        .map(|_| carmi.class_spawn(exe, Vec::<String>::new(), SpawnTarget::Class("any".into())))
        .collect();
    // Flushing in a task of its own: events must be taken as they arrive.
    let flusher = carmi.clone();
    let flushed = tokio::spawn(async move {
        flusher.flush().await;
        Instant::now()
    });
    let mine: HashSet<RequestId> = requests.iter().copied().collect();
    let mut started = Vec::new();
    let mut exited = 0;
    while exited < SPAWN_COUNT {
        let what = format!("{} started, {exited} exited", started.len());
        let event = inbox
            .try_take(&what, |x| match x {
                Incoming::Rm(
                    e @ (Event::ProcessStarted { request, .. }
                    | Event::ProcessExited { request, .. }),
                ) if mine.contains(request) => Some(e.clone()),
                _ => None,
            })
            .await?;
        match event {
            Event::ProcessStarted { .. } => started.push(t0.elapsed()),
            Event::ProcessExited { status, .. } => {
                if status != ExitStatus::Code(0) {
                    return Err(format!("a spawned process ended with {status:?}").into());
                }
                exited += 1;
            }
            _ => unreachable!("only starts and exits are taken"),
        }
    }
    let all_exited = t0.elapsed();
    let written = flushed.await? - t0;
    if started.len() != SPAWN_COUNT {
        return Err(format!("{} exits but {} starts", SPAWN_COUNT, started.len()).into());
    }
    Ok(SpawnRun {
        written,
        first_started: started[0],
        all_started: started[SPAWN_COUNT - 1],
        all_exited,
    })
}

/// Gives a job's hosts back and closes its connection.
pub(super) async fn release(carmi: Carmi, mut inbox: Inbox, hosts: &[HostId]) -> Result<()> {
    inbox.try_done(carmi.delhosts(hosts)).await?;
    carmi.flush().await;
    Ok(())
}

/// The three kinds of run, per repetition.
pub(super) struct SpawnRep {
    /// Fresh executable: upload, distribution to every machine, execution.
    cold: SpawnRun,
    /// The same executable again on the same connection: nothing to transfer.
    warm: SpawnRun,
    /// The same executable from a new job: uploaded again (the client
    /// remembers uploads per connection) but in every machine's cache.
    reupload: SpawnRun,
}

pub(super) async fn spawn_reps(pool: &Pool) -> Result<Vec<SpawnRep>> {
    let mut reps = Vec::new();
    let seed0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    for rep in 0..SPAWN_REPS {
        let exe = pool.dir.join(format!("padded-{rep}.sh"));
        write_executable(&exe, EXE_SIZE, seed0.wrapping_add(rep as u64 * 0x9e37_79b9))?;

        let (carmi, mut inbox, hosts) = job_with_hosts(
            pool.locals[0].app_addr.clone(),
            pool.secret.clone(),
            SPAWN_COUNT,
        )
        .await?;
        let cold = spawn_run(&carmi, &mut inbox, &exe).await?;
        let warm = spawn_run(&carmi, &mut inbox, &exe).await?;
        release(carmi, inbox, &hosts).await?;

        let (carmi, mut inbox, hosts) = job_with_hosts(
            pool.locals[0].app_addr.clone(),
            pool.secret.clone(),
            SPAWN_COUNT,
        )
        .await?;
        let reupload = spawn_run(&carmi, &mut inbox, &exe).await?;
        release(carmi, inbox, &hosts).await?;
        reps.push(SpawnRep {
            cold,
            warm,
            reupload,
        });
    }
    Ok(reps)
}

/// Median, minimum and maximum of one timing over the repetitions, in ms.
pub(super) fn spread(
    reps: &[SpawnRep],
    pick: impl Fn(&SpawnRep) -> Duration,
) -> (Duration, String) {
    let mut v: Vec<Duration> = reps.iter().map(pick).collect();
    v.sort();
    let median = v[v.len() / 2];
    let text = format!(
        "{} ({}–{})",
        millis(median),
        millis(v[0]),
        millis(v[v.len() - 1])
    );
    (median, text)
}

pub(super) fn run_spawn(rt: &tokio::runtime::Runtime) -> Result<()> {
    let machines = vec![Vec::new(); SPAWN_MACHINES];
    let pool = Pool::start("bench-spawn", SPAWN_SLOTS, &machines);
    let load = load_average();
    eprintln!("carmi-bench: spawn");
    let reps = rt
        .block_on(spawn_reps(&pool))
        .map_err(|e| format!("{e}\n{}", pool.logs()))?;
    drop(pool);

    print_command("spawn");
    println!(
        "{SPAWN_COUNT} `class_spawn` requests of one {} MiB executable (a shell script that exits at once) on \
         {SPAWN_MACHINES} local RMs x {SPAWN_SLOTS} slots, all on this host; times from the first `class_spawn` \
         call until the application sees the events. Median of {SPAWN_REPS} repetitions (min–max), each with a \
         fresh executable. *Cold*: cached nowhere. *Re-uploaded*: a new job sends it again; every machine has it \
         cached. *Warm*: the same job spawns it again; nothing is transferred. *Written* is when `flush` returned: \
         the requests and the upload handed to the socket to the local RM. Execution includes each local RM copying \
         the executable from its cache into the process's sandbox. Load average at the start: {}.\n",
        EXE_SIZE >> 20,
        load
    );
    println!(
        "| Run | Written (ms) | First started (ms) | All {SPAWN_COUNT} started (ms) | All {SPAWN_COUNT} exited (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    type Pick = fn(&SpawnRep) -> SpawnRun;
    let kinds: [(&str, Pick); 3] = [
        ("cold (upload + distribution + execution)", |r| r.cold),
        ("re-uploaded (upload + execution)", |r| r.reupload),
        ("warm (execution only)", |r| r.warm),
    ];
    for (name, pick) in kinds {
        println!(
            "| {name} | {} | {} | {} | {} |",
            spread(&reps, |r| pick(r).written).1,
            spread(&reps, |r| pick(r).first_started).1,
            spread(&reps, |r| pick(r).all_started).1,
            spread(&reps, |r| pick(r).all_exited).1,
        );
    }
    println!();

    // Differences per repetition, then their median: the runs of one
    // repetition share a pool state, so their difference is the fairer one.
    let diff = |a: Duration, b: Duration| a.saturating_sub(b);
    let (cold_total, _) = spread(&reps, |r| r.cold.all_exited);
    println!("| Component (to all {SPAWN_COUNT} exited) | Time (ms) | Derived as |");
    println!("|---|---:|---|");
    println!(
        "| staging | {} | cold − warm |",
        spread(&reps, |r| diff(r.cold.all_exited, r.warm.all_exited)).1
    );
    println!(
        "| — upload: application → local RM → global RM | {} | re-uploaded − warm |",
        spread(&reps, |r| diff(r.reupload.all_exited, r.warm.all_exited)).1
    );
    println!(
        "| — distribution: global RM → {SPAWN_MACHINES} machine caches | {} | cold − re-uploaded |",
        spread(&reps, |r| diff(r.cold.all_exited, r.reupload.all_exited)).1
    );
    println!(
        "| execution: sandbox, start, exit, report | {} | warm |",
        spread(&reps, |r| r.warm.all_exited).1
    );
    println!(
        "| total, cold | {} | target under 1000: {} |",
        spread(&reps, |r| r.cold.all_exited).1,
        if cold_total < Duration::from_secs(1) {
            "met"
        } else {
            "**not met**"
        }
    );
    println!();
    Ok(())
}
