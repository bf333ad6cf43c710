//! End to end over real daemons, fair share per user (issue 15, item 7):
//! user alice submits ten jobs and user bob one, each wanting every machine
//! of a 20-slot pool; bob gets about half the pool, not one eleventh (the
//! per-job share). The users are the identities of their tokens; `carmi q`
//! shows each one's priority and usage.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::authz::Power;
use carmi_tests::{Pool, text, write_script};

/// `carmi` as `user` (a submit token of that identity), masters on m0.
fn carmi_as(pool: &Pool, user: &str) -> std::process::Command {
    let token = pool.dir.join(format!("{user}.token"));
    if !token.exists() {
        pool.token_file(&token, user, Power::Submit, None, 3600);
    }
    let mut cmd = pool.carmi();
    cmd.env("CARMI_TOKEN", &token).env("CARMI_MACHINE", "m0");
    cmd
}

/// A job wanting 1 to 20 machines whose master naps.
fn greedy_job(dir: &Path) -> PathBuf {
    write_script(&dir.join("nap.sh"), "#!/bin/sh\nsleep 240\n");
    let sub = dir.join("greedy.sub");
    std::fs::write(&sub, "executable = nap.sh\nmachine_count = 1..20\nqueue\n").unwrap();
    sub
}

fn submit(pool: &Pool, user: &str, sub: &Path) {
    let out = carmi_as(pool, user)
        .arg("submit")
        .arg(sub)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "submit as {user}: {}\n{}",
        text(&out.stderr),
        pool.logs()
    );
}

/// Hosts held per owner, from `carmi q --json`.
fn held(pool: &Pool) -> (u64, u64) {
    let out = pool.carmi().args(["q", "--json"]).output().unwrap();
    let q: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut by = (0, 0);
    for j in q.as_array().into_iter().flatten() {
        let n: u64 = j["classes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["held"].as_u64().unwrap_or(0))
            .sum();
        match j["owner"].as_str() {
            Some("alice") => by.0 += n,
            Some("bob") => by.1 += n,
            _ => {}
        }
    }
    by
}

/// Waits up to 90 s (a loaded CI machine) for `cond` on the holdings.
async fn wait_for(pool: &Pool, what: &str, cond: impl Fn((u64, u64)) -> bool) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let h = held(pool);
        if cond(h) {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: alice and bob hold {h:?}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_one_job_gets_about_half_the_pool_beside_one_with_ten() {
    let pool = Pool::start("fairshare", 10, &[vec![], vec![]]);
    pool.wait_registered();
    let sub = greedy_job(&pool.dir);
    for _ in 0..10 {
        submit(&pool, "alice", &sub);
    }
    wait_for(&pool, "alice's ten jobs take the pool", |h| h.0 == 20).await;
    // A few seconds of the whole pool: alice's usage is clearly above bob's
    // (usage is sampled once a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    submit(&pool, "bob", &sub);
    // Per job bob would hold 20/11, one or two hosts; per user he holds
    // half (alice's ten jobs keep their minimums of one each).
    let h = wait_for(&pool, "bob gets about half the pool", |h| h.1 >= 9).await;
    assert!(h.0 + h.1 <= 20 && h.0 >= 10, "{h:?}");
    // `carmi q` lists both users, bob (less used) with the better priority.
    let out = pool.carmi().arg("q").output().unwrap();
    let q = text(&out.stdout);
    let rows: Vec<Vec<&str>> = q
        .lines()
        .skip_while(|l| !l.starts_with("USER"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .take_while(|w: &Vec<&str>| w.len() == 6)
        .collect();
    assert_eq!(rows.len(), 2, "{q}");
    assert_eq!((rows[0][0], rows[1][0]), ("bob", "alice"), "{q}");
    let prio = |r: &Vec<&str>| r[1].parse::<f64>().unwrap();
    assert!(prio(&rows[0]) < prio(&rows[1]), "{q}");
    assert_eq!(rows[1][4], "10", "alice's jobs: {q}");
}

/// `carmi q --json` as a list of (job, owner, state).
fn jobs(pool: &Pool) -> Vec<(u64, String, String)> {
    let out = pool.carmi().args(["q", "--json"]).output().unwrap();
    let q: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    q.as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            let s = |k: &str| j[k].as_str().unwrap_or_default().to_string();
            (j["job"].as_u64().unwrap_or(0), s("owner"), s("state"))
        })
        .collect()
}

/// Issue 15, item 7: waiting jobs START by user priority, not only in
/// submit order. Alice's two jobs hold the whole pool and ten more of hers
/// wait; bob's one job, submitted after all of them, starts at the first
/// machine that frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_one_job_starts_before_another_user_s_ten_waiting_ones() {
    let pool = Pool::start("fairshare-start", 1, &[vec![], vec![]]);
    pool.wait_registered();
    greedy_job(&pool.dir);
    let sub = pool.dir.join("one.sub");
    std::fs::write(&sub, "executable = nap.sh\nmachine_count = 1\nqueue\n").unwrap();
    for _ in 0..12 {
        submit(&pool, "alice", &sub);
    }
    wait_for(&pool, "alice's first two jobs take the pool", |h| h.0 == 2).await;
    // A few seconds of alice holding the pool: her usage is above bob's none.
    tokio::time::sleep(Duration::from_secs(3)).await;
    submit(&pool, "bob", &sub);
    let q = jobs(&pool);
    let waiting = |owner: &str| {
        q.iter()
            .filter(|(_, o, s)| o == owner && s == "waiting")
            .count()
    };
    assert_eq!((waiting("alice"), waiting("bob")), (10, 1), "{q:?}");
    // One of alice's running jobs ends: bob's job takes its machine.
    let (first, _, _) = q
        .iter()
        .find(|(_, o, s)| o == "alice" && s == "running")
        .cloned()
        .expect("alice runs a job");
    let out = pool
        .carmi()
        .args(["rm", &first.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h = wait_for(&pool, "bob's job starts", |h| h.1 == 1).await;
    assert_eq!(h, (1, 1));
    let q = jobs(&pool);
    assert_eq!(
        q.iter()
            .filter(|(_, o, s)| o == "alice" && s == "waiting")
            .count(),
        10,
        "{q:?}"
    );
}
