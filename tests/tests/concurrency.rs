//! End to end over real daemons, concurrency limits (issue 32): the global
//! RM started with `--concurrency-limit matlab=1`, two jobs naming `matlab`
//! on a pool with room for both. The second waits, `carmi q` saying for
//! what, and starts only once the first has ended: their histories and the
//! lines their masters write say so, whatever the timing.

use std::time::Duration;

use carmi_tests::{Pool, PoolOptions};

const LIMIT: Duration = Duration::from_secs(120);

/// `carmi q --json` as (job, state, note).
fn queue(pool: &Pool) -> Vec<(u64, String, String)> {
    let out = pool.carmi().args(["q", "--json"]).output().unwrap();
    let q: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    q.as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            (
                j["job"].as_u64().unwrap_or(0),
                j["state"].as_str().unwrap_or("").to_string(),
                j["note"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_job_waits_for_a_concurrency_limit_and_starts_when_the_holder_ends() {
    let options = PoolOptions {
        global_args: vec!["--concurrency-limit".into(), "MatLab=1".into()],
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("concurrency", 2, &[vec![], vec![]], options);
    pool.wait_registered();
    let dir = pool.dir.join("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let order = dir.join("order.txt");
    let go = dir.join("go");
    // Each master notes its start, waits for the test's go-ahead, and
    // notes its end: lines in the order things happened.
    let master = format!(
        "#!/bin/sh\necho \"$1 start\" >> {o}\nwhile [ ! -e {g} ]; do sleep 0.1; done\necho \"$1 end\" >> {o}\n",
        o = order.display(),
        g = go.display()
    );
    let submit = |name: &str| {
        let sub = format!(
            "executable = master.sh\narguments = {name}\nconcurrency_limits = matlab\nqueue\n"
        );
        pool.submit_script(&dir, &master, &sub)
    };
    let first = submit("first");
    let second = submit("second");
    // The first runs; the second waits for the licence, not for machines
    // (two machines of two slots are idle).
    pool.wait_for("the second job to wait for matlab", LIMIT, || {
        let q = queue(&pool);
        let state = |id: &str| q.iter().find(|j| j.0.to_string() == id).cloned();
        match (state(&first), state(&second)) {
            (Some((_, s1, _)), Some((_, s2, note)))
                if s1 == "running"
                    && s2 == "waiting"
                    && note == "waits for concurrency limit matlab (1 of 1 in use)" =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    });
    let analyze = pool.run_ok(pool.carmi().args(["q", "-analyze", &second]));
    assert!(
        analyze.contains("waits for concurrency limit matlab"),
        "{analyze}"
    );
    std::fs::write(&go, "").unwrap();
    let h1 = pool.wait_history(&first, LIMIT);
    let h2 = pool.wait_history(&second, LIMIT);
    assert!(
        h2.usage.started_unix >= h1.ended_unix,
        "the second started at {} before the first ended at {}",
        h2.usage.started_unix,
        h1.ended_unix
    );
    let lines = std::fs::read_to_string(&order).unwrap();
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        ["first start", "first end", "second start", "second end"],
        "{}",
        pool.logs()
    );
}
