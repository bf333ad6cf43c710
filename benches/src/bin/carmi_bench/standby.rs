//! The `standby` benchmark (issue 35): what replication costs a submit,
//! and how long a takeover takes. One run, side by side: submit latency to
//! a lone manager, then to an active manager with one standby in sync
//! (every journal append waits for the standby's fsync too); then the
//! active manager is killed with SIGKILL ten times (each time the other
//! takes over, and the killed one comes back as a standby and is waited
//! in sync) and the time from the kill until the pool answers `status`
//! through the list of managers is taken.

use std::time::{Duration, Instant};

use carmi_api::admin::{pool_status, request_with_payload};
use carmi_api::msg::{FromGlobal, SubmitRequest, ToGlobal};
use carmi_testkit::{Managers, Pool, PoolOptions};

use super::cluster::{MASTER, master_exe};
use super::{Latency, Result, load_average, millis, print_command};

/// Milliseconds with two decimals: a submit takes about one.
fn ms2(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// Submits timed per setting.
const SUBMITS: usize = 200;
/// Takeovers timed.
const KILLS: usize = 10;

/// A job that matches no machine: it stays queued, each submit one
/// journal append of the same size.
fn request() -> Result<ToGlobal> {
    let text = "executable = master\nmaster_requirements = Machine == \"nowhere\"\nqueue\n";
    let spec = carmi_api::submit::parse("bench.sub", text).map_err(|e| e.to_string())?;
    Ok(ToGlobal::Submit(Box::new(SubmitRequest {
        owner: "alice".into(),
        machine: "nowhere".into(),
        executable: master_exe(),
        spec,
        submitted_unix: carmi_api::token::now_unix(),
        anywhere: true,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    })))
}

async fn submits(pool: &Pool) -> Result<Latency> {
    let exe = master_exe();
    let uploads = [(&exe, MASTER)];
    let mut samples = Vec::new();
    for _ in 0..SUBMITS {
        let t = Instant::now();
        match request_with_payload(&pool.global_addr, &pool.secret, &uploads, request()?).await? {
            (FromGlobal::Submitted { .. }, _) => samples.push(t.elapsed()),
            (other, _) => return Err(format!("submit refused: {other:?}").into()),
        }
    }
    Ok(Latency::of(&samples))
}

/// Kills the active manager `KILLS` times; the time each took until the
/// pool answered again.
fn takeovers(rt: &tokio::runtime::Runtime, m: &mut Managers) -> Result<Vec<Duration>> {
    let mut times = Vec::new();
    let mut active = 0;
    for _ in 0..KILLS {
        m.wait_in_sync();
        m.kill(active);
        let t = Instant::now();
        loop {
            if rt
                .block_on(pool_status(&m.pool.global_addr, &m.pool.secret))
                .is_ok()
            {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("no manager answered within 120 s\n{}", m.logs()).into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        times.push(t.elapsed());
        m.restart(active);
        active = 1 - active;
    }
    Ok(times)
}

/// Runs the benchmark and prints its tables.
pub(super) fn run_standby(rt: &tokio::runtime::Runtime) -> Result<()> {
    print_command("standby");
    let single = {
        let pool = Pool::start_with("standby-bench-one", 1, &[], PoolOptions::default());
        rt.block_on(submits(&pool))?
    };
    let mut m = Managers::start("standby-bench", 2, 1, &[], PoolOptions::default());
    m.wait_in_sync();
    let replicated = rt.block_on(submits(&m.pool))?;
    println!(
        "Submit latency, {SUBMITS} submits one after another (load average {}):\n",
        load_average()
    );
    println!("| managers | p50 ms | p99 ms |\n|---|---|---|");
    for (name, l) in [
        ("one (no standby)", &single),
        ("active + 1 standby in sync", &replicated),
    ] {
        println!("| {name} | {} | {} |", ms2(l.median), ms2(l.p99));
    }
    let mut times = takeovers(rt, &mut m)?;
    times.sort();
    let sum: Duration = times.iter().sum();
    println!(
        "\nTakeover over {KILLS} SIGKILLs of the active manager (kill to the first answer through the list): min {} ms, median {} ms, mean {} ms, max {} ms\n",
        millis(times[0]),
        millis(times[times.len() / 2]),
        millis(sum / times.len() as u32),
        millis(times[times.len() - 1])
    );
    Ok(())
}
