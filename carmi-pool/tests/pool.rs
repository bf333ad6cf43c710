//! The embedded pool with real daemons in-process.

use std::collections::BTreeSet;
use std::time::Duration;

use carmi_api::admin::pool_status;
use carmi_api::handshake::Secret;
use carmi_api::msg::MachineStatus;
use carmi_pool::pool::SUBMIT_HOST;
use carmi_pool::{EmbeddedPool, OwnerModel, PoolOptions, Regime, Shape, Stochastic, Trace};

fn options(hosts: usize, owners: OwnerModel, speedup: f64) -> PoolOptions {
    PoolOptions {
        hosts,
        owners,
        speedup,
        seed: 3,
        handle_signals: false,
        ..PoolOptions::default()
    }
}

async fn status(pool: &EmbeddedPool) -> Vec<MachineStatus> {
    let secret = pool.admin_secret().unwrap();
    pool_status(&pool.global_addr().to_string(), &secret)
        .await
        .unwrap()
}

/// The state of every pool machine's slot, by host name.
fn slot_states(machines: &[MachineStatus]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = machines
        .iter()
        .filter(|m| m.name != SUBMIT_HOST)
        .flat_map(|m| {
            m.slots
                .iter()
                .map(|s| (m.name.clone(), s.state.to_string()))
        })
        .collect();
    v.sort();
    v
}

async fn refused(addr: std::net::SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_hosts_come_up_with_varied_ads_and_leave_nothing_behind() {
    let pool = EmbeddedPool::start(options(16, OwnerModel::None, 1.0))
        .await
        .unwrap();
    let dir = pool.dir().to_path_buf();
    assert!(dir.join("pool.secret").is_file());
    let machines = status(&pool).await;
    let names: BTreeSet<&str> = machines.iter().map(|m| m.name.as_str()).collect();
    let expected: BTreeSet<String> = (1..=16).map(|i| format!("host{i:02}")).collect();
    let expected: BTreeSet<&str> = expected
        .iter()
        .map(String::as_str)
        .chain([SUBMIT_HOST])
        .collect();
    assert_eq!(names, expected);
    let states = slot_states(&machines);
    assert_eq!(states.len(), 16);
    assert!(states.iter().all(|(_, s)| s == "idle"), "{states:?}");
    // The submit-side local RM offers no slot to jobs.
    let submit = machines.iter().find(|m| m.name == SUBMIT_HOST).unwrap();
    assert!(submit.slots.is_empty());
    // The ads the global RM holds are the varied ones the pool reports.
    assert_eq!(pool.hosts().len(), 16);
    for h in pool.hosts() {
        let m = machines.iter().find(|m| m.name == h.name).unwrap();
        let attr = |n: &str| {
            m.attributes
                .iter()
                .find(|(a, _)| a == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(attr("Memory"), Some(h.memory_mib.to_string()), "{}", h.name);
        assert_eq!(attr("Mips"), Some(h.mips.to_string()), "{}", h.name);
        assert!((0.5..=2.0).contains(&h.speed));
    }
    let speeds: BTreeSet<String> = pool.hosts().iter().map(|h| h.speed.to_string()).collect();
    assert!(speeds.len() > 4, "{speeds:?}");

    let global = pool.global_addr();
    let locals: Vec<_> = pool
        .hosts()
        .iter()
        .map(|h| h.app_addr)
        .chain([pool.submit_addr()])
        .collect();
    assert!(!refused(global).await);
    pool.shutdown().await;
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(refused(global).await, "the global RM still listens");
    for a in locals {
        assert!(refused(a).await, "a local RM still listens on {a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_owner_takes_a_host_and_gives_it_back() {
    // At speed-up 600: host02's owner arrives after 0.5 s and leaves after
    // 1.5 s; a policy minute is 0.1 s, so a policy that waits 15 idle minutes
    // before it starts jobs again gives the host back 1.5 s later.
    let trace = Trace::parse("host02 300 arrive\nhost02 900 leave\n").unwrap();
    let pool = EmbeddedPool::start(options(3, OwnerModel::Trace(trace), 600.0))
        .await
        .unwrap();
    let host02 = |m: &[MachineStatus]| {
        slot_states(m)
            .into_iter()
            .find(|(n, _)| n == "host02")
            .unwrap()
            .1
    };
    let mut seen = vec![host02(&status(&pool).await)];
    for _ in 0..1000 {
        let m = status(&pool).await;
        let s = host02(&m);
        // The other hosts' owners never come.
        assert!(
            slot_states(&m)
                .iter()
                .all(|(n, s)| n == "host02" || s == "idle"),
            "{m:?}"
        );
        if seen.last() != Some(&s) {
            seen.push(s);
        }
        if seen.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.len(), 3, "host02 went through {seen:?}");
    assert_eq!(seen[0], "idle");
    assert_ne!(seen[1], "idle");
    assert_eq!(seen[2], "idle");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churning_model_changes_slot_states_over_time() {
    // Visits of two minutes, absences of half an hour (longer than the 15
    // idle minutes a policy may want before it starts jobs), at 3600x: a
    // state change somewhere in the pool every few tens of milliseconds.
    let churn = Stochastic {
        shape: Shape::Exponential,
        ..Stochastic::flat(Regime {
            mean_present: 120.0,
            mean_absent: 1800.0,
        })
    };
    let pool = EmbeddedPool::start(options(8, OwnerModel::Stochastic(churn), 3600.0))
        .await
        .unwrap();
    let mut snapshots = BTreeSet::new();
    let mut busy_hosts = BTreeSet::new();
    for _ in 0..500 {
        let states = slot_states(&status(&pool).await);
        for (n, s) in &states {
            if s != "idle" {
                busy_hosts.insert(n.clone());
            }
        }
        snapshots.insert(states);
        if snapshots.len() >= 5 && busy_hosts.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        snapshots.len() >= 5,
        "{} distinct pool states",
        snapshots.len()
    );
    assert!(busy_hosts.len() >= 3, "owners came to {busy_hosts:?}");
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pool_removes_its_folder() {
    let pool = EmbeddedPool::start(options(2, OwnerModel::None, 1.0))
        .await
        .unwrap();
    let dir = pool.dir().to_path_buf();
    assert!(dir.is_dir());
    drop(pool);
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[tokio::test]
async fn bad_options_are_refused_before_anything_starts() {
    let mut o = options(2, OwnerModel::None, 0.0);
    let e = EmbeddedPool::start(o.clone())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("speedup"), "{e}");
    o.speedup = 1.0;
    o.hosts = 0;
    let e = EmbeddedPool::start(o).await.err().unwrap().to_string();
    assert!(e.contains("hosts"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_owner_over_the_control_connection_takes_a_host_and_gives_it_back() {
    use carmi_api::msg::{FromLocalControl, OwnerEvent};
    use carmi_pool::driver::RemoteOwner;

    let pool = EmbeddedPool::start(options(2, OwnerModel::None, 600.0))
        .await
        .unwrap();
    // A control connection needs an admin token (or the machine's own).
    let token = carmi_api::token::read_token_file(pool.token_file()).unwrap();
    let secret = Secret::from_file(pool.secret_file())
        .unwrap()
        .with_token(Some(token));
    let host = &pool.hosts()[1];
    let owner = RemoteOwner::connect(&host.app_addr.to_string(), &secret)
        .await
        .unwrap();
    let FromLocalControl::OwnerApplied { applied, state, .. } =
        owner.send(OwnerEvent::Arrive).await.unwrap();
    assert!(applied);
    assert_eq!(state, "Owner");
    let mut states = slot_states(&status(&pool).await);
    for _ in 0..50 {
        if states.contains(&(host.name.clone(), "owner".into())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        states = slot_states(&status(&pool).await);
    }
    assert!(
        states.contains(&(host.name.clone(), "owner".into())),
        "{states:?}"
    );
    // Back to the pool once the owner has been away 15 policy minutes (1.5 s).
    assert!(owner.send(OwnerEvent::Leave).await.is_ok());
    for _ in 0..100 {
        states = slot_states(&status(&pool).await);
        if states.contains(&(host.name.clone(), "idle".into())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        states.contains(&(host.name.clone(), "idle".into())),
        "{states:?}"
    );
    pool.shutdown().await;
}
