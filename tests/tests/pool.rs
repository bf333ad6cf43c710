//! End to end: a real `carmi-global` and eight `carmi-local` processes on
//! localhost, with different attributes, driven by a test application
//! through the client library over TCP with authentication on.

use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::client::{ConnectError, ConnectOptions, Incoming, connect};
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, ExitStatus, FailureCode, Reply, SpawnTarget};
use carmi_tests::{HEARTBEAT_MS, Inbox, MISSED_HEARTBEATS, Pool, write_script};

fn machines() -> Vec<Vec<String>> {
    (0..8)
        .map(|i| {
            vec![
                format!("Fast = {}", i % 2 == 0),
                format!("Memory = {}", 1024 * (i + 1)),
                format!("Site = \"lab{}\"", i % 3),
            ]
        })
        .collect()
}

async fn app(pool: &Pool, local: usize) -> (carmi_api::client::Carmi, Inbox) {
    let opts = ConnectOptions::new(pool.locals[local].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.unwrap_or_else(|e| {
        panic!(
            "connect to {}: {e}\n{}",
            pool.locals[local].name,
            pool.logs()
        )
    });
    (carmi, Inbox::new(events))
}

fn script(pool: &Pool, name: &str, body: &str) -> std::path::PathBuf {
    let p = pool.dir.join(name);
    write_script(&p, &format!("#!/bin/sh\n{body}\n"));
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_end_to_end() {
    let mut pool = Pool::start("services", 2, &machines());
    let (carmi, mut inbox) = app(&pool, 0).await;

    // Classes: a good one, a bad one with a position in the message.
    let fast = carmi.define_class("fast", "Fast == true");
    let bad = carmi.define_class("bad", "Memory >=");
    let big = carmi.define_class("big", "Memory >= 4096 && Site == \"lab1\"");
    inbox.done(fast).await;
    inbox.done(big).await;
    let (code, msg) = inbox.failed(bad).await;
    assert_eq!(code, FailureCode::BadExpression);
    assert!(msg.contains("column"), "no position in {msg:?}");
    match inbox.done(carmi.get_class_definitions()).await {
        Reply::Classes(cs) => assert!(
            cs.iter()
                .any(|c| c.name == "fast" && c.expression.contains("Fast"))
        ),
        other => panic!("unexpected {other:?}"),
    }
    let (code, _) = inbox.failed(carmi.addhosts("nosuch", 1, 1)).await;
    assert_eq!(code, FailureCode::UnknownClass);

    // Growth is announced to subscribers; addhosts delivers in increments.
    let notify = carmi.add_notify("fast");
    inbox.done(notify).await;
    let add = carmi.addhosts("fast", 4, 2);
    let (hosts, groups) = inbox.hosts_added(add, 4).await;
    assert_eq!(groups, vec![2, 2], "hosts come in groups of the increment");

    // Many requests outstanding at once, each answered under its own id.
    let infos: Vec<(RequestId, HostId)> =
        hosts.iter().map(|&h| (carmi.get_host_info(h), h)).collect();
    let config = carmi.config();
    for (req, h) in infos {
        match inbox.done(req).await {
            Reply::Host(info) => {
                assert_eq!(info.host, h);
                assert!(info.ad.contains("Fast"), "ad lacks Fast: {}", info.ad);
                let ad = classad_of(&info.ad);
                assert_eq!(ad, "true", "host {h} is not fast: {}", info.ad);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    match inbox.done(config).await {
        Reply::Hosts(list) => {
            let mut got: Vec<HostId> = list.iter().map(|h| h.host).collect();
            got.sort();
            let mut want = hosts.clone();
            want.sort();
            assert_eq!(got, want);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A request that cannot be met stays pending until cancelled: four fast
    // machines have eight slots, four are already ours.
    let greedy = carmi.addhosts("fast", 100, 1);
    let (got, _) = inbox.hosts_added(greedy, 4).await;
    assert_eq!(got.len(), 4);
    let cancel = carmi.cancel_request(greedy);
    inbox.done(cancel).await;
    let (code, _) = inbox.failed(greedy).await;
    assert_eq!(code, FailureCode::Cancelled);

    // A process: started, exits with its status and CPU time.
    let exe = script(
        &pool,
        "exit3.sh",
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3",
    );
    let spawn = carmi.class_spawn(
        &exe,
        Vec::<String>::new(),
        SpawnTarget::Class("fast".into()),
    );
    let (process, host) = inbox
        .take_within(Duration::from_secs(20), "ProcessStarted", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request,
                process,
                host,
            }) if *request == spawn => Some((*process, *host)),
            _ => None,
        })
        .await;
    assert!(
        hosts.contains(&host) || got.contains(&host),
        "spawned on a host not ours"
    );
    let (status, cpu) = inbox
        .take_within(Duration::from_secs(30), "ProcessExited", |x| match x {
            Incoming::Rm(Event::ProcessExited {
                request,
                process: p,
                status,
                cpu_seconds,
            }) if *request == spawn && *p == process => Some((status.clone(), *cpu_seconds)),
            _ => None,
        })
        .await;
    assert_eq!(status, ExitStatus::Code(3));
    assert!(cpu > 0.0, "a busy loop used no CPU time?");
    match inbox.done(carmi.process_info(process)).await {
        Reply::Process(info) => assert_eq!(info.process, process),
        other => panic!("unexpected {other:?}"),
    }

    // Direct messages to a spawned process, which echoes them back.
    let echo = std::path::PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let spawn_echo = carmi.class_spawn(&echo, Vec::<String>::new(), SpawnTarget::Host(hosts[0]));
    let echo_pid = inbox
        .take_within(Duration::from_secs(30), "echo started", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn_echo => Some(*process),
            _ => None,
        })
        .await;
    let big_body = Bytes::from(vec![7u8; 1 << 20]);
    // The echo process may still be connecting: retry until a message gets through.
    let mut answered = false;
    for attempt in 0..50 {
        carmi.send(echo_pid, 10, Bytes::from_static(b"ping"));
        let got = tokio::time::timeout(Duration::from_millis(300), async {
            inbox
                .take_within(Duration::from_millis(300), "echo", |x| match x {
                    Incoming::Message {
                        from,
                        tag: 11,
                        data,
                    } if *from == echo_pid => Some(data.clone()),
                    Incoming::SendFailed { to, .. } if *to == echo_pid => Some(Bytes::new()),
                    _ => None,
                })
                .await
        })
        .await;
        if let Ok(data) = got
            && &data[..] == b"ping"
        {
            answered = true;
            break;
        }
        let _ = attempt;
    }
    assert!(answered, "the echo process never answered\n{}", pool.logs());
    carmi.send(echo_pid, 20, big_body.clone());
    let back = inbox
        .take_within(Duration::from_secs(20), "1 MiB echo", |x| match x {
            Incoming::Message {
                from,
                tag: 21,
                data,
            } if *from == echo_pid => Some(data.clone()),
            _ => None,
        })
        .await;
    assert_eq!(back, big_body, "a 1 MiB message came back altered");
    carmi.send(echo_pid, 0, Bytes::new());
    let status = inbox
        .take_within(Duration::from_secs(20), "echo exit", |x| match x {
            Incoming::Rm(Event::ProcessExited {
                request, status, ..
            }) if *request == spawn_echo => Some(status.clone()),
            _ => None,
        })
        .await;
    assert_eq!(status, ExitStatus::Code(0));

    // A class with allocated hosts cannot be removed.
    let (code, _) = inbox.failed(carmi.remove_class("fast")).await;
    assert_eq!(code, FailureCode::ClassInUse);

    // Losing a machine: every holder of its hosts hears within the heartbeat bound.
    let all: Vec<HostId> = hosts.iter().chain(got.iter()).copied().collect();
    let watch = carmi.delete_notify(&all);
    inbox.done(watch).await;
    // The victim must not be the app's own local RM (m0): losing that would
    // cut the app off instead of notifying it.
    let mut victim = None;
    for &h in &all {
        let info = match inbox.done(carmi.get_host_info(h)).await {
            Reply::Host(info) => info,
            other => panic!("unexpected {other:?}"),
        };
        let machine = pool
            .locals
            .iter()
            .position(|l| info.name.ends_with(&format!("@{}", l.name)))
            .unwrap_or_else(|| panic!("host name {} names no machine", info.name));
        if machine != 0 {
            victim = Some(machine);
            break;
        }
    }
    let victim = victim.expect("the four fast machines are not all m0");
    let killed_at = Instant::now();
    pool.kill_local(victim);
    let bound = Duration::from_millis(HEARTBEAT_MS * (MISSED_HEARTBEATS as u64 + 2))
        + Duration::from_secs(2);
    let lost = inbox
        .take_within(bound + Duration::from_secs(5), "HostDeleted", |x| match x {
            Incoming::Rm(Event::HostDeleted { request, host, .. }) if *request == watch => {
                Some(*host)
            }
            _ => None,
        })
        .await;
    assert!(all.contains(&lost));
    assert!(
        killed_at.elapsed() <= bound,
        "loss noticed after {:?}",
        killed_at.elapsed()
    );

    // Giving hosts back, then the class can go.
    let mut remaining: Vec<HostId> = match inbox.done(carmi.config()).await {
        Reply::Hosts(list) => list.iter().map(|h| h.host).collect(),
        other => panic!("unexpected {other:?}"),
    };
    remaining.sort();
    inbox.done(carmi.delhosts(&remaining)).await;
    inbox.done(carmi.remove_class("fast")).await;
    let (code, _) = inbox.failed(carmi.get_host_info(remaining[0])).await;
    assert_eq!(code, FailureCode::NotYourHost);
}

/// The value of `Fast` in a host's ad text.
fn classad_of(ad: &str) -> String {
    let start = ad.find("Fast = ").map(|i| i + 7).unwrap_or(0);
    ad[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_a_killed_process_die_with_it() {
    let pool = Pool::start("children", 1, &machines()[..2]);
    let (carmi, mut inbox) = app(&pool, 0).await;
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", 1, 1);
    let (hosts, _) = inbox.hosts_added(add, 1).await;
    let pidfile = pool.dir.join("child.pid");
    let exe = script(
        &pool,
        "family.sh",
        &format!("sleep 300 & echo $! > {}; wait", pidfile.display()),
    );
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(hosts[0]));
    inbox
        .take_within(Duration::from_secs(20), "started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let child: u32 = loop {
        if let Ok(s) = std::fs::read_to_string(&pidfile)
            && let Ok(pid) = s.trim().parse()
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the script never wrote its child's pid"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(alive(child), "child {child} not running");
    // Giving the host back kills what runs there, children included.
    inbox.done(carmi.delhosts(&hosts)).await;
    inbox
        .take_within(Duration::from_secs(20), "exited", |x| match x {
            Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(child) {
        assert!(
            Instant::now() < deadline,
            "child {child} outlived its parent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `ExcludeHosts` through the real daemons: a machine the job gave back
/// after excluding it is not granted to the class again, though it is idle
/// and the class's best ranked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excluded_machine_is_not_granted_to_the_class_again() {
    let machines = vec![
        vec!["Memory = 8192".to_string()],
        vec!["Memory = 1024".to_string()],
    ];
    let pool = Pool::start("exclude", 1, &machines);
    let (carmi, mut inbox) = app(&pool, 0).await;
    inbox
        .done(carmi.define_class_ranked("c", "true", "Memory"))
        .await;
    let add = carmi.addhosts("c", 1, 1);
    let (big, _) = inbox.hosts_added(add, 1).await;
    inbox.done(carmi.exclude_hosts("c", &big)).await;
    inbox.done(carmi.delhosts(&big)).await;

    let add = carmi.addhosts("c", 2, 1);
    let (small, _) = inbox.hosts_added(add, 1).await;
    assert_ne!(small, big, "the excluded machine came back");
    // Requests are served in order: had the idle excluded machine been
    // grantable, its grant would have come before the cancel is processed.
    inbox.done(carmi.cancel_request(add)).await;
    let (code, _) = inbox.failed(add).await;
    assert_eq!(code, FailureCode::Cancelled);
    match inbox.done(carmi.get_class_definitions()).await {
        Reply::Classes(cs) => {
            assert_eq!(cs.len(), 1);
            assert_eq!(cs[0].rank.as_deref(), Some("Memory"));
            assert_eq!(cs[0].excluded, [pool.locals[0].name.clone()]);
        }
        other => panic!("unexpected {other:?}"),
    }
    let (code, _) = inbox.failed(carmi.exclude_hosts("nosuch", &small)).await;
    assert_eq!(code, FailureCode::UnknownClass);
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    carmi_pool::sweep::alive(pid as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused_and_garbage_closes_only_its_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pool = Pool::start("auth", 1, &machines()[..2]);

    let wrong =
        carmi_api::handshake::Secret::new(b"not the pool secret at all").expect("long enough");
    match connect(ConnectOptions::new(pool.locals[0].app_addr.clone(), wrong)).await {
        Err(ConnectError::WrongSecret { .. }) => {}
        Err(e) => panic!("expected WrongSecret, got {e}"),
        Ok(_) => panic!("a wrong secret was accepted"),
    }

    for target in [pool.global_addr.clone(), pool.locals[0].app_addr.clone()] {
        let mut s = tokio::net::TcpStream::connect(&target)
            .await
            .expect("connect raw");
        s.write_all(&[
            0, 0, 0, 12, 0, 0, 0, 8, b'g', b'a', b'r', b'b', b'a', b'g', b'e', b'!',
        ])
        .await
        .expect("write garbage");
        let mut buf = [0u8; 256];
        let closed = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "{target} kept a connection that sent garbage"
        );
    }

    // Everyone else is still served.
    let (carmi, mut inbox) = app(&pool, 1).await;
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", 2, 2);
    let (hosts, _) = inbox.hosts_added(add, 2).await;
    assert_eq!(hosts.len(), 2);
    let _ = ProcessId(0);
}
