//! Relays (issue 36): machines whose local RMs connect to a `carmi-relay`
//! (two listed, the first used) register and run a job as if connected to
//! the global RM, which holds one link per relay; SIGKILL of the relay
//! while the job runs makes both machines reconnect through the second
//! within their grace, and the job finishes once, with its output. A
//! daemon token the pool revoked is refused at the relay, with the global
//! RM's reason.

use std::time::Duration;

use carmi_tests::{Pool, text};

fn log(pool: &Pool, name: &str) -> String {
    std::fs::read_to_string(pool.dir.join(format!("{name}.log"))).unwrap_or_default()
}

/// Every log of the test: the pool's, its relays' and its extra machines'.
fn logs(pool: &Pool) -> String {
    let mut s = pool.logs();
    for n in ["r1", "r2", "m0", "m1", "m9"] {
        let text = log(pool, n);
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        s.push_str(&format!("--- {n}.log (last lines)\n"));
        for l in tail.iter().rev() {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

/// Whether `carmi status --json` lists `name` with its slots.
fn registered(pool: &Pool, name: &str) -> bool {
    let out = pool.carmi().args(["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array().is_some_and(|ms| {
        ms.iter()
            .any(|m| m["name"] == name && m["slots"].as_array().is_some_and(|s| !s.is_empty()))
    })
}

/// How many times machine `name`'s log says it connected through `addr`.
fn connections_through(pool: &Pool, name: &str, addr: &str) -> usize {
    log(pool, name)
        .lines()
        .filter(|l| l.contains("connected to the global RM") && l.contains(addr))
        .count()
}

#[test]
fn machines_behind_a_relay_run_a_job_that_survives_the_relay() {
    let pool = Pool::start("relay", 1, &[]);
    let mut r1 = pool.start_relay("r1", &[]);
    // r2 is given a list of managers whose first is down (as a standby
    // manager's list may be): it links to the next.
    let managers = format!("127.0.0.1:1,{}", pool.global_addr);
    let r2 = pool.start_relay("r2", &["--global", &managers]);
    let list = format!("{},{}", r1.addr, r2.addr);
    let direct = ["--global-direct", pool.global_addr.as_str()];
    let _m0 = pool.start_extra_local("m0", &list, &direct);
    let _m1 = pool.start_extra_local("m1", &list, &direct);
    let up = || registered(&pool, "m0") && registered(&pool, "m1");
    pool.wait_until(
        "both machines registered through r1",
        Duration::from_secs(30),
        up,
    );
    for m in ["m0", "m1"] {
        assert_eq!(
            connections_through(&pool, m, &r1.addr),
            1,
            "{}",
            logs(&pool)
        );
    }
    // The global RM holds the relay's link; the machines' links are channels on it.
    let global = log(&pool, "global");
    assert!(global.contains("relay connected"), "{}", logs(&pool));

    // A job whose master runs on a machine behind the relay for a while.
    let dir = pool.dir.join("submit");
    std::fs::create_dir_all(&dir).unwrap();
    let master = "#!/bin/sh\necho started\nsleep 6\necho finished\nexit 0\n";
    let job = pool.submit_script(
        &dir,
        master,
        "executable = master.sh\noutput = out.txt\nerror = err.txt\nqueue\n",
    );
    let running = || {
        let q = text(&pool.carmi().args(["q", &job]).output().unwrap().stdout);
        q.contains(" R ") || q.contains("running")
    };
    pool.wait_until("the job running", Duration::from_secs(30), running);

    r1.kill();
    let through_r2 = || {
        ["m0", "m1"]
            .iter()
            .all(|m| connections_through(&pool, m, &r2.addr) >= 1)
    };
    // Well within the loss grace (6 heartbeats of 500 ms): reconnection
    // backoff starts at 100 ms.
    pool.wait_until(
        "both machines back through r2",
        Duration::from_secs(3),
        through_r2,
    );
    let out = pool.wait_job(&dir, &job, 60);
    pool.assert_exit(&out, 0);
    let output = std::fs::read_to_string(dir.join("out.txt")).unwrap_or_default();
    assert_eq!(output, "started\nfinished\n", "{}", logs(&pool));
    // Never lost: no machine was declared lost, so nothing was started again.
    let global = log(&pool, "global");
    assert!(!global.contains("declaring it lost"), "{}", logs(&pool));
}

#[test]
fn a_revoked_daemon_token_is_refused_at_the_relay() {
    let pool = Pool::start("relay-revoke", 1, &[]);
    let relay = pool.start_relay("r1", &[]);
    let admin = |args: &[&str]| pool.run_ok(pool.carmi().args(args));
    let made = admin(&[
        "token",
        "create",
        "--identity",
        "m9",
        "--authz",
        "daemon",
        "--machine",
        "m9",
    ]);
    let list: serde_json::Value =
        serde_json::from_str(&admin(&["token", "list", "--json"])).unwrap();
    let id = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["identity"] == "m9")
        .expect("m9's token is listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    admin(&["token", "revoke", &id]);
    let direct = ["--global-direct", pool.global_addr.as_str()];
    let mut cmd = pool.extra_local_command("m9", &relay.addr, &direct);
    // The command reads its token file when it starts: the revoked one.
    let token = pool.dir.join("m9.token");
    std::fs::remove_file(&token).unwrap();
    carmi_api::files::write_private(&token, made.trim(), false).unwrap();
    let mut child = cmd.stdout(std::process::Stdio::null()).spawn().unwrap();
    let refused = || {
        let text = log(&pool, "m9");
        text.contains("revoked")
    };
    pool.wait_until(
        "m9 refused for its revoked token",
        Duration::from_secs(20),
        refused,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(!registered(&pool, "m9"), "{}", logs(&pool));
    assert!(
        log(&pool, "r1").contains("connection refused at the relay")
            || log(&pool, "global").contains("connection refused at the relay"),
        "{}",
        logs(&pool)
    );
}

/// Two hundred machines of a [`Fleet`] (the real protocol from tasks of this
/// process) through two relays: all register, stay registered past the loss
/// window on folded heartbeats alone, serve jobs' `AddHosts` through the
/// relays, and a silenced tenth is noticed; the global RM's open files do
/// not grow with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_through_relays_registers_stays_and_serves_jobs() {
    use carmi_api::msg::{Event, Request};
    use carmi_tests::{Fleet, FleetOptions, PoolOptions};
    const MACHINES: usize = 200;
    const PATIENCE: Duration = Duration::from_secs(60);
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 3,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("relay-fleet", 2, &[], options);
    let files_before = carmi_tests::open_fds(pool.global_pid());
    let (r1, r2) = (pool.start_relay("r1", &[]), pool.start_relay("r2", &[]));
    let bare = pool.secret.clone().with_token(None);
    let fleet_options = FleetOptions {
        machines: MACHINES,
        ..FleetOptions::default()
    };
    let relays = format!("{},{}", r1.addr, r2.addr);
    let fleet = Fleet::start(&relays, &bare, &pool.key, &fleet_options)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&pool)));
    let listed = || async {
        carmi_api::admin::pool_status(&pool.global_addr, &pool.secret)
            .await
            .map(|s| s.len())
            .unwrap_or(0)
    };
    assert_eq!(listed().await, MACHINES, "{}", logs(&pool));
    // The global RM holds two relay links, not two hundred connections.
    let files = carmi_tests::open_fds(pool.global_pid());
    assert!(
        files < files_before + 50,
        "the global RM has {files} open files with {MACHINES} machines behind relays (was {files_before})"
    );
    // Past the loss window (3 s), on heartbeats the relays folded.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(listed().await, MACHINES, "{}", logs(&pool));

    let mut app = fleet
        .attach(0, PATIENCE)
        .await
        .expect("attach through a relay");
    let define = Request::DefineClass {
        name: "any".into(),
        expression: "true".into(),
        rank: None,
        replace: false,
    };
    app.request(define).unwrap();
    assert!(matches!(app.event(PATIENCE).await, Ok(Event::Done { .. })));
    app.request(Request::AddHosts {
        class: "any".into(),
        count: 3,
        increment: 3,
    })
    .unwrap();
    match app.event(PATIENCE).await {
        Ok(Event::HostsAdded { hosts, .. }) => assert_eq!(hosts.len(), 3),
        other => panic!("AddHosts through a relay: {other:?}\n{}", logs(&pool)),
    }

    for i in MACHINES - MACHINES / 10..MACHINES {
        fleet.vanish(i);
    }
    let t = std::time::Instant::now();
    while listed().await > MACHINES - MACHINES / 10 {
        assert!(
            t.elapsed() < PATIENCE,
            "the silent tenth was not noticed\n{}",
            logs(&pool)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary = log(&pool, "r1") + &log(&pool, "r2");
    assert!(
        summary
            .lines()
            .any(|l| l.contains("relay summary") && !l.contains(" 0 unchanged heartbeats folded")),
        "the relays folded no heartbeat\n{}",
        logs(&pool)
    );
    fleet.stop().await;
}
