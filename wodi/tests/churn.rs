//! WoDi on an embedded pool whose owners come and go: twenty cycles of 31
//! steps, every result exactly once, while hosts are suspended, vacated and
//! added again during the run, and no worker process outlives the job.

mod common;

use std::time::Duration;

use carmi_pool::{EmbeddedPool, OwnerModel, PoolOptions, Trace};

/// Policy seconds per wall second: a policy minute is 0.1 s, so START waits
/// 1.5 s of idleness, CONTINUE 0.5 s and PREEMPT 1 s of suspension.
const SPEEDUP: f64 = 600.0;

/// Owner visits in policy seconds (wall time = these / 600):
/// - host01 drops by for a minute at 0.5 s: suspended, then resumed;
/// - host02 stays 12 minutes from 1 s: suspended, vacated at 2 s, lent
///   again 1.5 s after its owner leaves at 2.2 s (added back near 3.7 s);
/// - host03 stays from 1.5 s to 2.5 s: vacated too;
/// - host04 comes twice briefly.
const TRACE: &str = "\
host01 300 arrive
host01 360 leave
host02 600 arrive
host02 1320 leave
host03 900 arrive
host03 1500 leave
host04 1200 arrive
host04 1230 leave
host04 1500 arrive
host04 1520 leave
";

/// Processes running in a directory under `dir` (workers run in sandboxes there).
fn processes_under(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                cwd.display()
            ));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_cycles_exactly_once_while_owners_suspend_vacate_and_return_hosts() {
    let pool = EmbeddedPool::start(PoolOptions {
        hosts: 8,
        owners: OwnerModel::Trace(Trace::parse(TRACE).expect("the trace parses")),
        speedup: SPEEDUP,
        seed: 3,
        ..PoolOptions::default()
    })
    .await
    .expect("the embedded pool starts");
    let dir = pool.dir().to_path_buf();

    // 60 ms steps: a cycle takes at least four rounds on 8 workers, so the
    // run lasts well past the owners' visits above.
    let stats = common::cycles_with_steps(
        &pool.submit_addr().to_string(),
        pool.secret_file(),
        8,
        20,
        60,
    )
    .await;

    assert_eq!(stats.steps_delivered, 20 * 31);
    let suspended = stats
        .timeline
        .iter()
        .flat_map(|row| &row.periods)
        .filter(|p| p.kind == wodi::stats::PeriodKind::Suspended)
        .count();
    assert!(suspended >= 1, "no host was suspended during the run");
    assert!(stats.hosts.lost >= 1, "no host was vacated during the run");
    assert!(
        stats.hosts.added > 8,
        "no host was added back during the run ({} added)",
        stats.hosts.added
    );

    // Every worker is gone once the job is complete (they ran from
    // sandboxes inside the pool's folder).
    let mut left = processes_under(&dir);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_under(&dir);
    }
    assert!(left.is_empty(), "processes outlived the job: {left:?}");
    pool.shutdown().await;
}
