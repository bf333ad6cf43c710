//! Executable staging through peers: the global RM sends fewer copies than
//! there are machines, and a peer that serves a corrupt copy or dies
//! mid-transfer does not stop the spawn (the fetcher falls back to the store).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use carmi_api::admin::request;
use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::exe::sha256_hex;
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, ExitStatus, FromGlobal, SpawnTarget, StageStats, ToGlobal};
use carmi_tests::{Inbox, Pool, PoolOptions, write_executable};

const PATIENCE: Duration = Duration::from_secs(60);

struct Job {
    carmi: Carmi,
    inbox: Inbox,
    /// Machine name (`m0`...) -> its host.
    hosts: HashMap<String, HostId>,
}

/// A job holding every slot of the pool (one per machine), attached through machine `via`.
async fn job(pool: &Pool, via: usize) -> Job {
    let opts = ConnectOptions::new(pool.locals[via].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect");
    let mut j = Job {
        carmi,
        inbox: Inbox::new(events).with_patience(PATIENCE),
        hosts: HashMap::new(),
    };
    let def = j.carmi.define_class("any", "true");
    j.inbox
        .take("DefineClass", |x| match x {
            Incoming::Rm(Event::Done { request, .. }) if *request == def => Some(()),
            _ => None,
        })
        .await;
    let n = pool.locals.len();
    let add = j.carmi.addhosts("any", n as u32, n as u32);
    while j.hosts.len() < n {
        let got = j
            .inbox
            .take("hosts", |x| match x {
                Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                    Some(hosts.clone())
                }
                _ => None,
            })
            .await;
        for h in got {
            let machine = h.name.rsplit('@').next().unwrap().to_string();
            j.hosts.insert(machine, h.host);
        }
    }
    j
}

/// Spawns `exe` on each of `machines` at once; waits for every process to exit 0.
async fn spawn_on(j: &mut Job, exe: &Path, machines: &[&str]) {
    let ids: Vec<RequestId> = machines
        .iter()
        .map(|m| {
            let host = j.hosts[*m];
            j.carmi
                .class_spawn(exe, Vec::<String>::new(), SpawnTarget::Host(host))
        })
        .collect();
    j.carmi.flush().await;
    all_exit_zero(j, ids).await;
}

/// Waits until every spawn of `ids` has exited with status 0.
async fn all_exit_zero(j: &mut Job, ids: Vec<RequestId>) {
    for id in ids {
        let status = j
            .inbox
            .take("exit", |x| match x {
                Incoming::Rm(Event::ProcessExited {
                    request, status, ..
                }) if *request == id => Some(status.clone()),
                Incoming::Rm(Event::Failed { request, failure }) if *request == id => {
                    panic!("spawn failed: {failure:?}")
                }
                _ => None,
            })
            .await;
        assert_eq!(status, ExitStatus::Code(0));
    }
}

async fn stats(pool: &Pool) -> StageStats {
    match request(&pool.global_addr, &pool.secret, None, ToGlobal::StageStats)
        .await
        .expect("StageStats")
    {
        FromGlobal::StageStats(s) => s,
        other => panic!("StageStats answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_rm_sends_fewer_copies_than_machines() {
    let pool = Pool::start("stage-tree", 1, &vec![Vec::new(); 6]);
    let mut j = job(&pool, 0).await;
    let exe = pool.dir.join("tree.sh");
    write_executable(&exe, 2 << 20, 41).unwrap();
    let all = ["m0", "m1", "m2", "m3", "m4", "m5"];
    spawn_on(&mut j, &exe, &all).await;
    let s = stats(&pool).await;
    assert_eq!(s.completed, 6, "every machine verified its copy: {s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
    assert_eq!(
        s.global_sends, 1,
        "default fan-out 1 (a chain): the store sends one copy: {s:?}"
    );
    assert_eq!(s.directed_global + s.directed_peer, 6, "{s:?}");
    // Every cache holds the right bytes.
    let sha = sha256_hex(&std::fs::read(&exe).unwrap());
    for m in all {
        let copy = std::fs::read(pool.dir.join(m).join("cache").join(&sha)).unwrap();
        assert_eq!(sha256_hex(&copy), sha, "{m}'s copy");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_peer_copy_is_refused_reported_and_fetched_from_the_store() {
    let options = PoolOptions {
        global_args: vec!["--stage-fanout".into(), "1".into()],
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("stage-corrupt", 1, &vec![Vec::new(); 3], options);
    let mut j = job(&pool, 0).await;
    let exe = pool.dir.join("corrupt.sh");
    write_executable(&exe, 1 << 20, 42).unwrap();
    spawn_on(&mut j, &exe, &["m0"]).await;
    // m0's cached copy goes bad behind its back (same size, other bytes).
    let sha = sha256_hex(&std::fs::read(&exe).unwrap());
    let cached = pool.dir.join("m0").join("cache").join(&sha);
    std::fs::set_permissions(&cached, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(&cached).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x55;
    std::fs::write(&cached, &bytes).unwrap();
    // With a fan-out of 1, one of m1/m2 gets the store, the other m0.
    spawn_on(&mut j, &exe, &["m1", "m2"]).await;
    let s = stats(&pool).await;
    assert!(s.directed_peer >= 1, "{s:?}");
    assert_eq!(s.failed, 1, "the corrupt copy is reported: {s:?}");
    for m in ["m1", "m2"] {
        let copy = std::fs::read(pool.dir.join(m).join("cache").join(&sha)).unwrap();
        assert_eq!(sha256_hex(&copy), sha, "{m}'s copy is the right one");
    }
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
    assert!(log.contains("a staged copy failed"), "{}", pool.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_dies_mid_transfer_does_not_stop_the_spawn() {
    // Peers serve at 1 MB/s, so a 3 MiB copy from m0 takes about 3 s; the
    // store (the global RM) is not limited.
    let options = PoolOptions {
        global_args: vec!["--stage-fanout".into(), "1".into()],
        local_settings: "stage_link_rate = 1.0\n".into(),
        ..PoolOptions::default()
    };
    let mut pool = Pool::start_with("stage-dies", 1, &vec![Vec::new(); 3], options);
    let mut j = job(&pool, 1).await;
    let exe = pool.dir.join("dies.sh");
    write_executable(&exe, 3 << 20, 43).unwrap();
    spawn_on(&mut j, &exe, &["m0"]).await;
    let ids: Vec<RequestId> = ["m1", "m2"]
        .iter()
        .map(|m| {
            j.carmi
                .class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(j.hosts[*m]))
        })
        .collect();
    j.carmi.flush().await;
    // Wait until the global RM has directed a fetch to m0, then kill m0.
    let mut directed = false;
    for _ in 0..100 {
        if stats(&pool).await.directed_peer >= 1 {
            directed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(directed, "no fetch was directed to a peer\n{}", pool.logs());
    pool.kill_local(0);
    all_exit_zero(&mut j, ids).await;
    let s = stats(&pool).await;
    assert_eq!(s.failed, 1, "the broken transfer is reported: {s:?}");
}
