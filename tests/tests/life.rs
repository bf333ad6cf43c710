//! End to end, a job's life after the queue (issue 20, item 4), over a real
//! `carmi-global` and `carmi-local` through the `carmi` command as a user
//! types it: `carmi hold` / `carmi release`, and the job's event log
//! (`carmi events`, the submit file's `log =`).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use carmi_tests::{Pool, text, write_job};
use serde_json::Value;

/// `carmi` as alice (her token names her: a job's owner is the identity
/// that submitted it), with the masters pinned to m0.
fn carmi(pool: &Pool) -> std::process::Command {
    let token = pool.dir.join("alice.token");
    if !token.exists() {
        let power = carmi_api::token::Power::Submit;
        pool.token_file(&token, "alice", power, None, 3600);
    }
    let mut cmd = pool.carmi();
    cmd.env("CARMI_MACHINE", "m0")
        .env("USER", "alice")
        .env("CARMI_TOKEN", &token);
    cmd
}

/// Runs `carmi ARGS`, asserting success; returns its stdout.
fn ok(pool: &Pool, args: &[&str]) -> String {
    pool.run_ok(carmi(pool).args(args))
}

fn json(pool: &Pool, args: &[&str]) -> Value {
    serde_json::from_str(&ok(pool, args)).expect("carmi --json prints JSON")
}

/// Polls `check` until it holds (the deadline only bounds a broken run).
fn until(pool: &Pool, what: &str, check: impl FnMut() -> bool) {
    pool.wait_until(what, Duration::from_secs(60), check);
}

/// Slot states of the pool, e.g. `["claimed", "idle"]`, sorted.
fn slot_states(pool: &Pool) -> Vec<String> {
    let mut states: Vec<String> = json(pool, &["status", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["slots"].as_array().unwrap().clone())
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect();
    states.sort();
    states
}

/// `(state, note, hosts held)` of `job` in `carmi q --json`.
fn queued(pool: &Pool, job: &str) -> Option<(String, String, u64)> {
    let q = json(pool, &["q", "--json"]);
    q.as_array()?
        .iter()
        .find(|j| j["job"].as_u64().map(|n| n.to_string()).as_deref() == Some(job))
        .map(|j| {
            let held = j["classes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["held"].as_u64().unwrap())
                .sum();
            (
                j["state"].as_str().unwrap().to_string(),
                j["note"].as_str().unwrap_or_default().to_string(),
                held,
            )
        })
}

fn submit(pool: &Pool, sub: &Path) -> String {
    let out = ok(pool, &["submit", sub.to_str().unwrap()]);
    out.trim().to_string()
}

fn wait(pool: &Pool, job: &str) -> Output {
    carmi(pool).args(["wait", job]).output().unwrap()
}

fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

#[test]
fn a_held_job_gives_back_its_hosts_and_runs_again_once_released() {
    let pool = Pool::start("life-hold", 2, &[vec![]]);
    let dir = &pool.dir;
    until(&pool, "the pool is up", || slot_states(&pool).len() == 2);
    // First run: records its pid and sleeps (it is killed by the hold);
    // the run after the release exits 7 at once.
    let script = format!(
        "if [ -e {d}/ran ]; then exit 7; fi\necho $$ > {d}/pid.tmp && mv {d}/pid.tmp {d}/pid\ntouch {d}/ran\nsleep 60",
        d = dir.display()
    );
    let id = submit(
        &pool,
        &write_job(dir, "sleeper", &script, "machine_count = 2..2\n"),
    );
    until(&pool, "the job runs with both hosts", || {
        queued(&pool, &id).is_some_and(|(s, _, h)| s == "running" && h == 2)
            && dir.join("pid").exists()
    });
    assert_eq!(slot_states(&pool), ["claimed", "claimed"]);
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let pid = pid.trim();
    assert!(alive(pid));

    assert_eq!(ok(&pool, &["hold", &id]), format!("cluster {id} held\n"));
    // Its hosts go back, its master is killed, q says why it waits.
    until(&pool, "both slots idle", || {
        slot_states(&pool) == ["idle", "idle"]
    });
    until(&pool, "the master killed", || !alive(pid));
    assert_eq!(
        queued(&pool, &id),
        Some(("held".into(), "held by alice".into(), 0))
    );
    let table = ok(&pool, &["q"]);
    assert!(table.contains("held"), "{table}");
    // `q -hold`, as condor_q's: the held jobs, each with its reason.
    let held = ok(&pool, &["q", "-hold"]);
    assert!(held.contains("^ held by alice"), "{held}");
    assert!(
        held.contains("1 job: 0 running, 0 waiting, 1 on hold"),
        "{held}"
    );
    // Holding it again, or releasing a job that is not held, is an error naming why.
    let again = carmi(&pool).args(["hold", &id]).output().unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("held already"),
        "{}",
        text(&again.stderr)
    );

    assert_eq!(
        ok(&pool, &["release", &id]),
        format!("cluster {id} released\n")
    );
    // It starts again from scratch, completes, and `wait` gives its status.
    let out = wait(&pool, &id);
    pool.assert_exit(&out, 7);
    let not_held = carmi(&pool).args(["release", &id]).output().unwrap();
    assert!(!not_held.status.success());
    until(&pool, "both slots idle after the end", || {
        slot_states(&pool) == ["idle", "idle"]
    });
    let events = ok(&pool, &["events", &id]);
    let kinds: Vec<&str> = events
        .lines()
        .map(|l| l.split(' ').nth(4).unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "submitted",
            "host-added",
            "host-added",
            "master-started",
            "held",
            "released",
            "host-added",
            "host-added",
            "master-started",
            "ended"
        ],
        "{events}"
    );
    assert!(events.contains(" held held by alice\n"), "{events}");
    assert!(events.ends_with(" ended exit 7\n"), "{events}");
}

#[test]
fn a_held_job_stays_held_across_a_global_rm_restart() {
    let mut pool = Pool::start("life-hold-restart", 1, &[vec![]]);
    let dir = pool.dir.clone();
    until(&pool, "the pool is up", || slot_states(&pool).len() == 1);
    let script = format!(
        "if [ -e {d}/ran ]; then exit 0; fi\ntouch {d}/ran\nsleep 60",
        d = dir.display()
    );
    let id = submit(&pool, &write_job(&dir, "again", &script, ""));
    until(&pool, "the job runs", || {
        queued(&pool, &id).is_some_and(|(s, _, _)| s == "running") && dir.join("ran").exists()
    });
    ok(&pool, &["hold", &id, "-reason", "disk full"]);
    pool.restart_global();
    until(&pool, "the restarted global RM answers", || {
        carmi(&pool)
            .args(["q", "--json"])
            .output()
            .unwrap()
            .status
            .success()
    });
    assert_eq!(
        queued(&pool, &id),
        Some(("held".into(), "disk full".into(), 0))
    );
    until(
        &pool,
        "the slot is idle, not given back to the held job",
        || slot_states(&pool) == ["idle"],
    );
    ok(&pool, &["release", &id]);
    let out = wait(&pool, &id);
    pool.assert_exit(&out, 0);
}

#[test]
fn the_log_file_holds_the_jobs_events_in_order() {
    // Two machines of one slot: the job grows to both, then loses m1.
    let mut pool = Pool::start("life-log", 1, &[vec![], vec![]]);
    let dir = pool.dir.clone();
    until(&pool, "the pool is up", || slot_states(&pool).len() == 2);
    let script = format!(
        "while [ ! -e {d}/go ]; do sleep 0.1; done\nexit 0",
        d = dir.display()
    );
    write_job(
        &dir,
        "grow",
        &script,
        "machine_count = 1..2\nlog = job.log\n",
    );
    // Submitted from its directory with a relative path, as the README does.
    let out = carmi(&pool)
        .current_dir(&dir)
        .args(["submit", "grow.sub"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
    let id = text(&out.stdout).trim().to_string();
    // `carmi submit` wrote the first line already.
    let log = dir.join("job.log");
    let first = std::fs::read_to_string(&log).unwrap();
    assert!(
        first
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(&format!("job {id} #1 submitted alice"))),
        "{first}"
    );
    until(&pool, "the job holds both hosts", || {
        queued(&pool, &id).is_some_and(|(_, _, h)| h == 2)
    });
    pool.kill_local(1);
    until(&pool, "the job lost the host of m1", || {
        ok(&pool, &["events", &id]).contains(" host-lost ")
    });
    // `events -f` follows the job until it ends, then exits by itself.
    let follower = carmi(&pool)
        .args(["events", "-f", "--json", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(dir.join("go"), "").unwrap();
    let followed = follower.wait_with_output().unwrap();
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    let last: Value = serde_json::from_str(text(&followed.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        last["kind"]["Ended"]["end"]["Completed"]["Code"], 0,
        "{last}"
    );
    let out = wait(&pool, &id);
    pool.assert_exit(&out, 0);
    let lines = std::fs::read_to_string(&log).unwrap();
    let kinds: Vec<(String, String)> = lines
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            assert_eq!((w[1], w[2]), ("job", id.as_str()), "{l}");
            (
                w[4].to_string(),
                w.get(6).copied().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(k, m)| (k.as_str(), m.as_str()))
        .collect();
    // The first host may come from either machine; the master runs on m0.
    let (first_host, second_host) = match kinds.get(1) {
        Some(&("host-added", "m0")) => ("m0", "m1"),
        _ => ("m1", "m0"),
    };
    assert_eq!(
        kinds,
        [
            ("submitted", ""),
            ("host-added", first_host),
            ("master-started", ""),
            ("host-added", second_host),
            ("host-lost", "m1"),
            ("ended", "0"),
        ],
        "{lines}"
    );
    // Every line read back as the format says: numbered from 1, in order.
    for (i, l) in lines.lines().enumerate() {
        assert!(
            l.split(' ').nth(3) == Some(&format!("#{}", i + 1)),
            "{lines}"
        );
    }
}
