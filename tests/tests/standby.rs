//! End to end, over real daemons (issue 35 item 1, docs/standby.md): a
//! pool with two managers, one active and one standing by with the state
//! streamed to it. The active one is killed with SIGKILL and its state
//! directory deleted while jobs run: the standby takes over, every
//! acknowledged submit, hold and removal is there, the running jobs keep
//! running (never started twice) and finish, and `carmi` given the list of
//! managers works throughout. Over network namespaces, a partition that
//! isolates the active manager leaves it the only active one, and a
//! takeover after it still finds everything.

use std::process::Stdio;
use std::time::{Duration, Instant};

use carmi_tests::{Managers, PoolOptions, gated_starts, state_of};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_standby_takes_over_from_a_killed_manager_whose_disk_is_gone() {
    let mut m = Managers::start("standby", 2, 1, &[vec![], vec![]], PoolOptions::default());
    m.pool.wait_registered();
    m.wait_in_sync();
    let dir = m.pool.dir.join("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let pool = &m.pool;
    let r1 = pool.submit_gated(&dir, "r1", "");
    let r2 = pool.submit_gated(&dir, "r2", "");
    pool.wait_until("both jobs run", LIMIT, || {
        gated_starts(&dir, "r1") == 1 && gated_starts(&dir, "r2") == 1
    });
    let waiting = pool.submit_gated(&dir, "w", "");
    let held = pool.submit_gated(&dir, "h", "");
    pool.run_ok(pool.carmi().args(["hold", &held.to_string()]));
    let removed = pool.submit_gated(&dir, "x", "");
    pool.run_ok(pool.carmi().args(["rm", &removed.to_string()]));

    // The active manager and its disk are lost.
    m.kill(0);
    std::fs::remove_dir_all(m.state_dir(0)).unwrap();
    let lost = Instant::now();
    assert!(
        m.becomes_active(1, LIMIT),
        "the standby did not take over\n{}",
        m.logs()
    );
    eprintln!(
        "standby active {:.2} s after the kill",
        lost.elapsed().as_secs_f64()
    );

    let pool = &m.pool;
    let mut last = Vec::new();
    pool.wait_until(
        "the queue as acknowledged, the jobs running again",
        LIMIT,
        || {
            last = pool.queue_states().unwrap_or_default();
            state_of(&last, r1) == Some("running")
                && state_of(&last, r2) == Some("running")
                && state_of(&last, held) == Some("held")
                && state_of(&last, waiting).is_some_and(|s| s != "running" && s != "held")
                && state_of(&last, removed).is_none()
        },
    );
    let history = pool.wait_history_json(&removed.to_string(), LIMIT);
    assert_eq!(
        history.len(),
        1,
        "the removal is in the history: {history:?}"
    );

    // Who is who, as `carmi pool status` says.
    let status = m.status();
    assert_eq!(status.len(), 2, "{status:?}");
    assert_eq!(status[0]["role"], "unreachable", "{status:?}");
    assert_eq!(status[1]["role"], "active", "{status:?}");

    // The running jobs were never started again, and finish.
    std::fs::write(dir.join("go"), "").unwrap();
    for job in [r1, r2, waiting] {
        let out = pool.wait_job(&dir, &job.to_string(), 120);
        pool.assert_exit(&out, 0);
    }
    assert_eq!(
        (gated_starts(&dir, "r1"), gated_starts(&dir, "r2")),
        (1, 1),
        "started once each"
    );
    assert_eq!(gated_starts(&dir, "w"), 1);
    assert_eq!(
        gated_starts(&dir, "h") + gated_starts(&dir, "x"),
        0,
        "held and removed never ran"
    );

    // With no manager active, `carmi` waits for one: the new active one is
    // killed and started again on its own disk, which holds the lease's
    // epoch whole, so it takes the lease back.
    m.kill(1);
    let mut q = m.pool.carmi();
    let mut q = q
        .args(["q", "--json"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        q.try_wait().unwrap().is_none(),
        "carmi gave up while no manager was active"
    );
    m.restart(1);
    assert!(m.becomes_active(1, LIMIT), "no restart\n{}", m.logs());
    let done = m
        .pool
        .wait_exit(&mut q, "carmi q during the restart", LIMIT);
    assert!(done.success(), "carmi q failed across the restart");
    let pool = &m.pool;
    pool.wait_until("the jobs back after the restart", LIMIT, || {
        let q = pool.queue_states().unwrap_or_default();
        state_of(&q, held) == Some("held") && state_of(&q, waiting).is_none()
    });

    // New jobs get new ids.
    let after = pool.submit_gated(&dir, "after", "");
    assert!(
        after > removed,
        "job {after} after the takeover, {removed} before"
    );
    let out = pool.wait_job(&dir, &after.to_string(), 120);
    pool.assert_exit(&out, 0);
}

#[test]
fn a_partition_of_the_active_manager_leaves_one_active_and_a_later_takeover_finds_everything() {
    if !carmi_tests::netns::ready("standby partition") {
        return;
    }
    // Three machines: all silent at once, the cut-off manager takes it for
    // its own cut and declares none lost (its jobs keep their machines).
    let mut m = Managers::start_net("standby-net", 2, 1, 3, PoolOptions::default());
    m.pool.wait_registered();
    m.wait_in_sync();
    let dir = m.pool.dir.join("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let running = m.pool.submit_gated(&dir, "r", "");
    m.pool
        .wait_until("the job runs", LIMIT, || gated_starts(&dir, "r") == 1);

    // The active manager is cut off: it keeps the lease, the standby waits.
    m.net.as_ref().unwrap().cut(0);
    assert!(
        !m.becomes_active(1, Duration::from_secs(8)),
        "a second manager became active during the partition\n{}",
        m.logs()
    );
    let lease = std::fs::read_to_string(&m.lock).unwrap();
    assert!(
        lease.contains(&format!("active {}\n", m.repl[0])),
        "{lease}"
    );
    let status = m.status();
    assert_eq!(status[0]["role"], "unreachable", "{status:?}");
    assert_eq!(status[1]["role"], "standby", "{status:?}");

    // Back: the standby is in sync again, and what is acknowledged now
    // survives the active manager's loss.
    m.net.as_ref().unwrap().restore(0);
    m.wait_in_sync();
    let held = m.pool.submit_gated(&dir, "h", "");
    m.pool
        .run_ok(m.pool.carmi().args(["hold", &held.to_string()]));
    m.kill(0);
    std::fs::remove_dir_all(m.state_dir(0)).unwrap();
    assert!(m.becomes_active(1, LIMIT), "no takeover\n{}", m.logs());
    let pool = &m.pool;
    pool.wait_until("the queue as acknowledged", LIMIT, || {
        let q = pool.queue_states().unwrap_or_default();
        state_of(&q, running) == Some("running") && state_of(&q, held) == Some("held")
    });
    std::fs::write(dir.join("go"), "").unwrap();
    let out = pool.wait_job(&dir, &running.to_string(), 120);
    pool.assert_exit(&out, 0);
    assert_eq!(gated_starts(&dir, "r"), 1, "started once");
}
