//! End to end, real daemons: what a spawned process prints reaches its
//! submitter (as events or as files on the submit side), completely and in order.

use std::time::Duration;

use carmi_api::client::{ConnectOptions, Incoming, SpawnOutput, connect};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, StdStream};
use carmi_tests::{Inbox, Pool, write_script};

async fn one_host(inbox: &mut Inbox, carmi: &carmi_api::client::Carmi) -> HostId {
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", 1, 1);
    inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                Some(hosts[0].host)
            }
            _ => None,
        })
        .await
}

/// Output items of `spawn` until its `OutputEnd`: (stdout, stderr, complete).
async fn output_of(inbox: &mut Inbox, spawn: RequestId) -> (Vec<u8>, Vec<u8>, bool) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        let item = inbox
            .take("output", |x| match x {
                Incoming::Output { request, .. } | Incoming::OutputEnd { request, .. }
                    if *request == spawn =>
                {
                    Some(x.clone())
                }
                _ => None,
            })
            .await;
        match item {
            Incoming::Output { stream, data, .. } => match stream {
                StdStream::Stdout => out.extend_from_slice(&data),
                StdStream::Stderr => err.extend_from_slice(&data),
            },
            Incoming::OutputEnd { complete, .. } => return (out, err, complete),
            _ => unreachable!(),
        }
    }
}

async fn exited(inbox: &mut Inbox, spawn: RequestId) {
    inbox
        .take("exit", |x| match x {
            Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await
}

fn script(pool: &Pool, name: &str, body: &str) -> std::path::PathBuf {
    let p = pool.dir.join(name);
    write_script(&p, &format!("#!/bin/sh\n{body}\n"));
    p
}

async fn app(pool: &Pool, local: usize) -> (carmi_api::client::Carmi, Inbox) {
    let opts = ConnectOptions::new(pool.locals[local].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", pool.logs()));
    let inbox = Inbox::new(events).with_patience(Duration::from_secs(30));
    (carmi, inbox)
}

/// Five million bytes on stdout between two short lines, two lines on stderr.
const PRINTER: &str = "printf 'out1\\n'; printf 'err1\\n' >&2; printf 'out2\\n'; \
     head -c 5000000 /dev/zero | tr '\\000' 'x'; printf 'err2\\n' >&2; printf 'end\\n'";

fn expected_stdout() -> Vec<u8> {
    let mut v = b"out1\nout2\n".to_vec();
    v.extend(std::iter::repeat_n(b'x', 5_000_000));
    v.extend_from_slice(b"end\n");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_of_a_spawned_process_reaches_the_submitter_complete_and_in_order() {
    let pool = Pool::start("output", 1, &[vec![], vec![]]);
    // The submitter attaches through machine 0; the process runs wherever the host is.
    let (carmi, mut inbox) = app(&pool, 0).await;
    let host = one_host(&mut inbox, &carmi).await;
    let exe = script(&pool, "printer.sh", PRINTER);

    // As events (the default).
    let spawn = carmi.class_spawn(
        &exe,
        Vec::<String>::new(),
        carmi_api::msg::SpawnTarget::Host(host),
    );
    let (out, err, complete) = output_of(&mut inbox, spawn).await;
    assert!(complete, "the output did not end cleanly\n{}", pool.logs());
    assert_eq!(out.len(), expected_stdout().len());
    assert!(out == expected_stdout(), "stdout differs");
    assert_eq!(err, b"err1\nerr2\n");
    exited(&mut inbox, spawn).await;

    // As files on the submit side, both streams into one file: the exact bytes.
    let file = pool.dir.join("both.txt");
    let spawn = carmi.class_spawn_with(
        &exe,
        Vec::<String>::new(),
        carmi_api::msg::SpawnTarget::Host(host),
        SpawnOutput::Files {
            stdout: file.clone(),
            stderr: pool.dir.join("err.txt"),
        },
    );
    let (out, err, complete) = output_of(&mut inbox, spawn).await;
    assert!(complete);
    assert!(out.is_empty() && err.is_empty(), "files mode sent events");
    exited(&mut inbox, spawn).await;
    let written = std::fs::read(&file).expect("stdout file");
    assert!(
        written == expected_stdout(),
        "stdout file differs ({} bytes)",
        written.len()
    );
    assert_eq!(
        std::fs::read(pool.dir.join("err.txt")).unwrap(),
        b"err1\nerr2\n"
    );

    // Discarded: no output at all, the process still runs to its end.
    let spawn = carmi.class_spawn_with(
        &exe,
        Vec::<String>::new(),
        carmi_api::msg::SpawnTarget::Host(host),
        SpawnOutput::Discard,
    );
    exited(&mut inbox, spawn).await;
    assert!(
        !inbox.kept().any(|x| matches!(x,
            Incoming::Output { request, .. } | Incoming::OutputEnd { request, .. } if *request == spawn)),
        "discarded output arrived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_rank_picks_the_preferred_machines_among_those_that_match() {
    // Memory grows with the index; only machines 0..3 are in the lab.
    let machines: Vec<Vec<String>> = (0..5)
        .map(|i| {
            vec![
                format!("Memory = {}", 1024 * (i + 1)),
                format!("InLab = {}", i < 4),
            ]
        })
        .collect();
    let pool = Pool::start("rank", 1, &machines);
    let (carmi, mut inbox) = app(&pool, 0).await;
    inbox
        .done(carmi.define_class_ranked("lab", "InLab == true", "Memory"))
        .await;
    let add = carmi.addhosts("lab", 2, 2);
    let names = inbox
        .take("two hosts", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                Some(hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>())
            }
            _ => None,
        })
        .await;
    let mut machines_got: Vec<String> = names
        .iter()
        .map(|n| n.rsplit('@').next().unwrap_or("").to_string())
        .collect();
    machines_got.sort();
    // m4 has the most memory but is not in the lab; m3 and m2 come next.
    assert_eq!(
        machines_got,
        vec!["m2".to_string(), "m3".to_string()],
        "{names:?}"
    );
}

/// A submitter that does not read its events holds the spawned process back
/// (bounded buffers all the way to the pipe) instead of buffering its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_event_stream_holds_the_printing_process_back() {
    let pool = Pool::start("backpressure", 1, &[vec![], vec![]]);
    let (carmi, mut inbox) = app(&pool, 0).await;
    let host = one_host(&mut inbox, &carmi).await;
    let done = pool.dir.join("done");
    let exe = script(
        &pool,
        "flood.sh",
        &format!("head -c 50000000 /dev/zero; touch {}", done.display()),
    );
    let spawn = carmi.class_spawn(
        &exe,
        Vec::<String>::new(),
        carmi_api::msg::SpawnTarget::Host(host),
    );
    // Not reading: far less than 50 MB fits in the buffers on the way.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !done.exists(),
        "50 MB were buffered for a submitter that did not read"
    );
    let (out, _, complete) = output_of(&mut inbox, spawn).await;
    assert!(complete);
    assert_eq!(out.len(), 50_000_000);
    assert!(out.iter().all(|&b| b == 0));
    exited(&mut inbox, spawn).await;
    assert!(done.exists());
}
