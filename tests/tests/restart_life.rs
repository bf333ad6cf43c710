//! End to end, over real daemons (issue 15 item 3): a small job's life with
//! the global RM killed with SIGKILL and restarted on the same journal at
//! each of its moments. After every restart the application sees nothing
//! lost and nothing twice: its job id, its run-time class, the hosts it
//! holds (with and without processes), its pending `AddHosts` (served later
//! as if nothing happened), its notify subscription, its exclusion, its
//! process (still reachable by message) and, at the end, its job's end
//! (the hosts go back to the pool).
//!
//! The kinds of state of item 3 and where they are checked: allocations
//! without processes (`hosts held`, moments 3-8), allocations with processes
//! (moment 5), run-time classes (every moment from 1), pending requests
//! (`AddHosts` pending from moment 3, served at moment 6), notify
//! subscriptions (moment 2, told of hosts at 3 and 6), exclusions (moment
//! 4), the job itself and its end (moments 0 and 8). Queue order across a
//! restart is covered at the router
//! (`router::hold_tests::the_queue_order_survives_a_restart`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, FailureCode, Reply, SpawnTarget};
use carmi_tests::{Pool, PoolOptions, Recorder};

/// An application's events, every one logged, so that the end can check
/// that nothing came twice.
struct Life {
    rec: Recorder,
    /// Probes whose failure is checked where they are sent (`Unavailable`
    /// while the global RM is away).
    probes: HashSet<RequestId>,
}

impl std::ops::Deref for Life {
    type Target = Recorder;
    fn deref(&self) -> &Recorder {
        &self.rec
    }
}

impl std::ops::DerefMut for Life {
    fn deref_mut(&mut self) -> &mut Recorder {
        &mut self.rec
    }
}

/// The hosts of the job as the global RM says (`Config`), asked until it
/// answers (the local RM holds requests while the global RM is away, and
/// fails them after 30 s) and holds `want` (its machines register again
/// one by one).
async fn hosts_become(carmi: &Carmi, life: &mut Life, want: &BTreeSet<HostId>, pool: &Pool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe = carmi.config();
        life.probes.insert(probe);
        let got = match life.answer("config", probe).await {
            Ok(Reply::Hosts(hosts)) => Some(hosts.iter().map(|h| h.host).collect::<BTreeSet<_>>()),
            Ok(other) => panic!("Config answered {other:?}"),
            Err((FailureCode::Unavailable, _)) => None,
            Err(f) => panic!("Config failed: {f:?}"),
        };
        if got.as_ref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the job holds {got:?}, not {want:?}, after the restart\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGKILL and restart of the global RM, then waits until every machine is
/// back and the job holds `hosts` again.
async fn restart(
    pool: &mut Pool,
    carmi: &Carmi,
    life: &mut Life,
    hosts: &BTreeSet<HostId>,
    moment: &str,
) {
    eprintln!(
        "restart at moment: {moment} ({:?})",
        std::time::SystemTime::now()
    );
    pool.restart_global();
    tokio::task::block_in_place(|| pool.wait_registered());
    hosts_become(carmi, life, hosts, pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_life_survives_a_sigkill_of_the_global_rm_at_each_moment() {
    // A machine lost meanwhile would change the job's hosts for another
    // reason than the restart: a loaded CI machine gets 10 s of silence.
    let options = PoolOptions {
        missed_heartbeats: 50,
        ..PoolOptions::default()
    };
    let mut pool = Pool::start_with("restart-life", 1, &[vec![], vec![], vec![]], options);
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect to m0");
    let job = carmi.job();
    let mut life = Life {
        rec: Recorder::new(events, Duration::from_secs(60)),
        probes: HashSet::new(),
    };
    let mut held = BTreeSet::new();

    let (add, notify) = moments_before_hosts(&mut pool, &carmi, &mut life, &mut held).await;
    let given = moments_with_hosts(&mut pool, &carmi, &mut life, &held, add, notify).await;
    nothing_twice(&life, &held, [add, notify], given);

    // 8: the job ends (its process leaves): after a restart its hosts are free.
    drop(carmi);
    drop(life);
    tokio::time::sleep(Duration::from_millis(500)).await;
    pool.restart_global();
    tokio::task::block_in_place(|| pool.wait_registered());
    let opts = ConnectOptions::new(pool.locals[1].app_addr.clone(), pool.secret.clone());
    let (next, events) = connect(opts).await.expect("connect to m1");
    assert_ne!(next.job(), job, "a new job");
    let mut life = Life {
        rec: Recorder::new(events, Duration::from_secs(60)),
        probes: HashSet::new(),
    };
    let r = next.define_class("any", "true");
    life.done("class defined", r).await;
    let add = next.addhosts("any", 3, 3);
    let (hosts, remaining) = life.added("every host of the pool", add).await;
    assert_eq!((hosts.len(), remaining), (3, 0), "{}", pool.logs());
}

/// Moments 0 to 3: the job, its class, its subscription, its hosts (one
/// more pending); returns the `AddHosts` and `AddNotify` requests.
async fn moments_before_hosts(
    pool: &mut Pool,
    carmi: &Carmi,
    life: &mut Life,
    held: &mut BTreeSet<HostId>,
) -> (RequestId, RequestId) {
    // 0: the job exists (started by hand).
    restart(pool, carmi, life, held, "job started").await;

    // 1: a class defined at run time.
    let r = carmi.define_class("any", "true");
    life.done("class defined", r).await;
    restart(pool, carmi, life, held, "class defined").await;
    let r = carmi.get_class_definitions();
    let Reply::Classes(classes) = life.done("classes", r).await else {
        panic!("GetClassDefinitions answers with classes");
    };
    assert!(
        classes
            .iter()
            .any(|c| c.name == "any" && c.expression == "true"),
        "{classes:?}"
    );

    // 2: a notify subscription.
    let notify = carmi.add_notify("any");
    life.done("subscribed", notify).await;
    restart(pool, carmi, life, held, "notify subscribed").await;

    // 3: AddHosts of 4 on a pool of 3: three hosts, one pending.
    let add = carmi.addhosts("any", 4, 1);
    for n in 0..3 {
        let (hosts, remaining) = life.added(&format!("host {n}"), add).await;
        assert_eq!(remaining, 3 - n);
        let (told, _) = life.added(&format!("notice of host {n}"), notify).await;
        assert_eq!(told, hosts);
        held.extend(hosts);
    }
    restart(
        pool,
        carmi,
        life,
        held,
        "addhosts pending, hosts without processes",
    )
    .await;

    (add, notify)
}

/// Moments 4 to 7: an exclusion, a process, the pending request served, the
/// process's exit; returns the host given back and granted again.
async fn moments_with_hosts(
    pool: &mut Pool,
    carmi: &Carmi,
    life: &mut Life,
    held: &BTreeSet<HostId>,
    add: RequestId,
    notify: RequestId,
) -> HostId {
    // 4: m2's host excluded from the class (a held host stays).
    let r = carmi.config();
    let Reply::Hosts(infos) = life.done("config", r).await else {
        panic!("Config answers with hosts");
    };
    let on = |machine: &str| {
        infos
            .iter()
            .find(|h| h.name.ends_with(&format!("@{machine}")))
            .unwrap_or_else(|| panic!("{machine} is held: {infos:?}"))
            .host
    };
    let (m0_host, m1_host, m2_host) = (on("m0"), on("m1"), on("m2"));
    let r = carmi.exclude_hosts("any", &[m2_host]);
    life.done("excluded", r).await;
    restart(pool, carmi, life, held, "host excluded").await;
    let r = carmi.get_class_definitions();
    let Reply::Classes(classes) = life.done("classes", r).await else {
        panic!("GetClassDefinitions answers with classes");
    };
    assert!(
        classes
            .iter()
            .any(|c| c.name == "any" && c.excluded == ["m2"]),
        "{classes:?}"
    );

    // 5: a process on m1's host: still reachable by message after the restart.
    let echo = std::path::PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let spawn = carmi.class_spawn(&echo, Vec::<String>::new(), SpawnTarget::Host(m1_host));
    let worker: ProcessId = life
        .take("process started", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(*process),
            _ => None,
        })
        .await;
    restart(pool, carmi, life, held, "process spawned").await;
    carmi.send(worker, 7, "ping");
    let (tag, data) = life
        .take("echo", |x| match x {
            Incoming::Message { from, tag, data } if *from == worker => Some((*tag, data.clone())),
            _ => None,
        })
        .await;
    assert_eq!((tag, &data[..]), (8, &b"ping"[..]));

    // 6: a host given back: the pending AddHosts (made before three
    // restarts) takes it, and the subscription tells of it.
    let given = m0_host;
    let del = carmi.delhosts(&[given]);
    life.done("host given back", del).await;
    let (hosts, remaining) = life.added("the pending AddHosts served", add).await;
    assert_eq!((hosts, remaining), (vec![given], 0));
    let (told, _) = life.added("notice of the host", notify).await;
    assert_eq!(told, vec![given]);
    restart(pool, carmi, life, held, "pending request served").await;

    // 7: the process exits.
    carmi.send(worker, 0, "bye");
    life.take("process exited", |x| match x {
        Incoming::Rm(Event::ProcessExited {
            request, process, ..
        }) if *request == spawn && *process == worker => Some(()),
        _ => None,
    })
    .await;
    restart(pool, carmi, life, held, "process exited").await;
    // Answered, and not as running. (The restarted global RM has forgotten
    // exited processes: the answer says the process is unknown to the job,
    // where before the restart it said how it exited.)
    let r = carmi.process_info(worker);
    let reply = life.answer("process info", r).await;
    assert!(
        match &reply {
            Ok(Reply::Process(p)) => p.state != carmi_api::msg::ProcessState::Running,
            Err((code, _)) => *code == FailureCode::UnknownProcess,
            Ok(_) => false,
        },
        "the exited process: {reply:?}"
    );
    life.probes.insert(r);

    given
}

/// Checks the whole log of the application's events.
fn nothing_twice(
    life: &Life,
    held: &BTreeSet<HostId>,
    [add, notify]: [RequestId; 2],
    given: HostId,
) {
    // Nothing came twice, nothing failed but probes while the RM was away:
    // each host told once to the AddHosts and once to the subscription, the
    // one given back and granted again twice.
    let mut told: HashMap<(RequestId, HostId), u32> = HashMap::new();
    let mut seen = HashSet::new();
    for item in &life.log {
        let Incoming::Rm(e) = item else { continue };
        match e {
            Event::Failed { request, failure } => assert!(
                life.probes.contains(request),
                "request {request} failed: {failure:?}"
            ),
            Event::HostsAdded { request, hosts, .. } => {
                for h in hosts {
                    *told.entry((*request, h.host)).or_default() += 1;
                }
            }
            other => assert!(seen.insert(format!("{other:?}")), "told twice: {other:?}"),
        }
    }
    let mut want = HashMap::new();
    for request in [add, notify] {
        for &h in held {
            want.insert((request, h), 1 + u32::from(h == given));
        }
    }
    assert_eq!(told, want);
}
