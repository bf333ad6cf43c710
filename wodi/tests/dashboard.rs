//! The global RM's web dashboard in a real browser: a pool of three machines
//! (`carmi_tests::Pool`, its global RM with `--http`), a WoDi run holding
//! all of them, the page loaded in headless Chromium over the DevTools
//! protocol (`carmi_tests::Browser`); an owner comes back on one machine
//! and the same page, never reloaded, shows it suspended. Screenshots of
//! each view are written under `target/tmp/` (the test prints where);
//! `docs/dashboard.png` is one of them.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use carmi_api::control::OwnerLink;
use carmi_api::msg::OwnerEvent;
use carmi_api::token::Power;
use carmi_tests::{Browser, Pool, PoolOptions, https};
use common::{config, test_worker};
use serde_json::Value;
use wodi::StepId;
use wodi::master::Master;

const MACHINES: usize = 3;

/// `GET`s (or `method`s) `path` of the dashboard at `base` with `headers`;
/// returns the status code and the body.
fn http(base: &str, method: &str, path: &str, headers: &[String]) -> (u16, String) {
    let addr = base
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Content-Length: 0\r\n\r\n");
    let out = https(base, &req);
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {out:?}"));
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

/// Machines and states as the page shows them (`data-*` of each card), and
/// as its text reads.
const PAGE_MACHINES: &str = "JSON.stringify([...document.querySelectorAll('.machine')]
    .map(e => [e.dataset.name, e.dataset.state, e.querySelector('.state').textContent]))";

/// Submits (with `carmi submit`) a job of `count` machines of any kind,
/// its master pinned to m0; returns its id.
fn submit_waiting(pool: &Pool, count: u32) -> u64 {
    use std::os::unix::fs::PermissionsExt;
    let exe = pool.dir.join("master.sh");
    std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sub = pool.dir.join("big.sub");
    let text = format!("executable = master.sh\nmachine_count = {count}\nqueue\n");
    std::fs::write(&sub, text).unwrap();
    let out = (pool.carmi().env("CARMI_MACHINE", "m0"))
        .args(["submit", "--json"])
        .arg(&sub)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["job"].as_u64().expect("a job id")
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dashboard-{name}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_the_pool_and_shows_an_owner_coming_back_without_a_reload() {
    let test = "the_dashboard_lists_the_pool_and_shows_an_owner_coming_back_without_a_reload";
    let Some(mut browser) = Browser::launch(test, 1280, 800).await else {
        return;
    };
    // Patient heartbeats: on a loaded machine a local RM declared lost (and
    // back) in the middle of the run's start is not what this test is about.
    let options = PoolOptions {
        global_args: vec!["--http".into(), "127.0.0.1:0".into()],
        missed_heartbeats: 25,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("dashboard", 1, &vec![Vec::new(); MACHINES], options);
    pool.wait_registered();
    let base = pool
        .dashboard
        .clone()
        .expect("the global RM serves a dashboard");
    assert!(base.starts_with("https://"), "{base}");
    let read = pool.token_file(
        &pool.dir.join("read.token"),
        "viewer",
        Power::Read,
        None,
        3600,
    );
    let bearer = format!("Authorization: Bearer {read}");

    // Access: a token of read power is needed, and nothing is written.
    assert_eq!(http(&base, "GET", "/api/view", &[]).0, 401);
    let forged = format!("Authorization: Bearer {read}x");
    assert_eq!(http(&base, "GET", "/api/view", &[forged]).0, 403);
    for (method, path) in [
        ("POST", "/api/jobs"),
        ("DELETE", "/api/jobs/1"),
        ("PUT", "/"),
    ] {
        let (code, body) = http(&base, method, path, std::slice::from_ref(&bearer));
        assert_eq!(code, 405, "{method} {path}: {body}");
    }

    // A WoDi run holding every machine: steps long enough to outlast the test.
    let cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        MACHINES as u32,
    );
    let mut master = Master::init(cfg, &"hello".to_string()).await.expect("init");
    master.begin_cycle(wodi::CycleId(0), &"b").unwrap();
    for s in 0..MACHINES as u64 {
        master.send_work(StepId(s), &"sleep 120000").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let api = loop {
        let (code, body) = http(&base, "GET", "/api/view", std::slice::from_ref(&bearer));
        assert_eq!(code, 200, "{body}");
        let view: Value = serde_json::from_str(&body).expect("the view is JSON");
        let lent = view["machines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["state"] == "lent")
            .count();
        if lent == MACHINES {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "the run never held every machine: {view}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let job = &api["jobs"][0];
    let held: u64 = (job["classes"].as_array().unwrap().iter())
        .map(|c| c["held"].as_u64().unwrap())
        .sum();
    assert_eq!(held, MACHINES as u64, "{api}");

    // An owner arriving before the worker runs finds the slot not yet
    // claimed at its local RM (claims travel with the spawn): wait for them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = |i: usize| {
        let sandbox = pool.dir.join(format!("m{i}/sandbox"));
        std::fs::read_dir(sandbox).is_ok_and(|mut d| d.next().is_some())
    };
    while !(0..MACHINES).all(running) {
        assert!(
            Instant::now() < deadline,
            "the workers never ran\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The page, opened with the token (which becomes its cookie).
    browser.goto(&format!("{base}?token={read}")).await;
    let want: Vec<Value> = (0..MACHINES)
        .map(|i| serde_json::json!([format!("m{i}"), "lent", "lent"]))
        .collect();
    let want = serde_json::to_string(&want).unwrap();
    let shown = browser
        .wait_for(
            &format!("(({PAGE_MACHINES}) === '{want}') && {PAGE_MACHINES}"),
            "every machine listed as lent",
        )
        .await;
    assert_eq!(shown, Value::String(want));
    let job_row = format!(
        "(r => r && [r.dataset.job, r.dataset.held, r.querySelector('.held').textContent])\
         (document.querySelector('tr.job[data-job=\"{}\"]'))",
        job["job"]
    );
    let row = browser.wait_for(&job_row, "the job's row").await;
    assert_eq!(row[1], Value::String(MACHINES.to_string()), "{row}");
    assert_eq!(row[2], Value::String(MACHINES.to_string()), "{row}");
    // Anything set now is lost if the page reloads.
    browser
        .eval("window.__loadedOnce = 'still here'; document.body.dataset.updates")
        .await;
    let updates_before: u64 = (browser.eval("document.body.dataset.updates").await)
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    let mut shots = vec![browser.screenshot(&screenshot_path("pool")).await];

    // The run publishes its progress on its job (every 2 s, the first time
    // before its hosts are busy): the queue shows its cycle, hosts busy.
    let id = job["job"].as_u64().unwrap();
    browser.eval("location.hash = '#queue'").await;
    let progress = format!(
        "(e => e && e.dataset.cycle === '0' && e.textContent.includes('3 of 3 hosts busy') \
          && e.textContent)(document.querySelector('.progress[data-job=\"{id}\"]'))"
    );
    let progress = browser
        .wait_for(&progress, "the run's cycle progress")
        .await;
    let progress = progress.as_str().unwrap();
    assert!(progress.contains("cycle 0: 0 of 3 steps"), "{progress}");
    assert!(progress.contains("3 of 3 hosts busy"), "{progress}");
    // The job view: one row per host, each held since the run got it.
    browser.eval(&format!("location.hash = '#job-{id}'")).await;
    let rows = "(rs => rs.length === 3 && rs.every(r => r.querySelector('rect.held')) \
                && JSON.stringify(rs.map(r => r.dataset.machine).sort()))\
                ([...document.querySelectorAll('#timeline g.row')])";
    let rows = browser.wait_for(rows, "the job's three hosts drawn").await;
    assert_eq!(rows, r#"["m0","m1","m2"]"#);
    shots.push(browser.screenshot(&screenshot_path("job")).await);
    browser.eval("location.hash = '#pool'").await;

    // A job no set of the pool's machines can start waits, and the queue
    // view says why, as `carmi q -analyze` counts the slots.
    let big = submit_waiting(&pool, MACHINES as u32 + 2);
    browser.eval("location.hash = '#queue'").await;
    let why = format!(
        "(r => r && r.nextElementSibling && r.nextElementSibling.className === 'why' \
          && r.nextElementSibling.textContent)(document.querySelector('tr.job[data-job=\"{big}\"]'))"
    );
    let why = browser.wait_for(&why, "the waiting job explained").await;
    let why = why.as_str().unwrap();
    assert!(why.contains(&format!("of {MACHINES} slots")), "{why}");
    assert!(why.contains("claimed by other jobs"), "{why}");
    shots.push(browser.screenshot(&screenshot_path("queue")).await);
    browser.eval("location.hash = '#curve'").await;
    shots.push(browser.screenshot(&screenshot_path("curve")).await);
    browser.eval("location.hash = '#pool'").await;

    // The owner of m1 comes back: its slot is suspended, and the page says so.
    let mut owner = OwnerLink::connect(&pool.locals[1].app_addr, &pool.secret)
        .await
        .unwrap_or_else(|e| panic!("control connection: {e}"));
    owner.send(OwnerEvent::Arrive).await.expect("owner arrives");
    let m1 = "(e => e && e.dataset.state === 'suspended' \
              && e.querySelector('.state').textContent)\
              (document.querySelector('.machine[data-name=\"m1\"]'))";
    let state = browser.wait_for(m1, "m1 shown suspended").await;
    assert_eq!(state, "suspended");
    let states = browser.eval(PAGE_MACHINES).await;
    let states: Vec<Vec<String>> = serde_json::from_str(states.as_str().unwrap()).unwrap();
    assert_eq!(states[0][1], "lent", "{states:?}");
    assert_eq!(states[2][1], "lent", "{states:?}");
    assert_eq!(
        browser.eval("window.__loadedOnce").await,
        "still here",
        "the page was reloaded"
    );
    let updates_after: u64 = (browser.eval("document.body.dataset.updates").await)
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(updates_after > updates_before);
    shots.push(browser.screenshot(&screenshot_path("suspended")).await);
    // The job view draws m1's span turning suspended, still without a reload.
    browser.eval(&format!("location.hash = '#job-{id}'")).await;
    // (Wide enough to see in the screenshot: the page redraws at every update.)
    let m1_span = "(r => r && r.getBBox().width >= 40)\
                   (document.querySelector('#timeline g.row[data-machine=\"m1\"] rect.suspended'))";
    browser
        .wait_for(m1_span, "m1's span turning suspended")
        .await;
    shots.push(browser.screenshot(&screenshot_path("job-suspended")).await);
    browser.eval("location.hash = '#pool'").await;

    // A ClassAd constraint, evaluated by the global RM on the machines' ads.
    browser
        .eval(
            "(c => { c.value = 'Name != \"m1\"'; c.dispatchEvent(new Event('change')); })\
             (document.getElementById('constraint'))",
        )
        .await;
    let kept = "(l => l.length === 2 && JSON.stringify(l))\
                ([...document.querySelectorAll('.machine')].map(e => e.dataset.name))";
    let kept = browser
        .wait_for(kept, "the constraint to keep m0 and m2")
        .await;
    assert_eq!(kept, r#"["m0","m2"]"#);
    for s in &shots {
        eprintln!("screenshot: {}", s.display());
    }
    drop(master);
}
