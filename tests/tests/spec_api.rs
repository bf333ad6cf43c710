//! End to end over real daemons, the specification's answers (issue 15,
//! item 5): `process_info` lists every process of the application (host,
//! parent, executable, state); `DefineClass` of an existing name fails
//! unless the request asks to replace it; `delhosts` answers with the hosts
//! it freed. Each request goes application -> local RM -> global RM and back.

use std::time::Duration;

use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::msg::{Event, FailureCode, ProcessState, Reply, SpawnTarget};
use carmi_tests::{Inbox, Pool, write_script};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_define_class_and_delhosts_answer_as_the_specification_says() {
    let pool = Pool::start("spec-api", 2, &[vec![], vec![]]);
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", pool.logs()));
    let mut inbox = Inbox::new(events);

    // DefineClass: new, duplicate (refused, unchanged), replaced.
    inbox.done(carmi.define_class("any", "true")).await;
    let (code, why) = inbox.failed(carmi.define_class("any", "false")).await;
    assert_eq!(code, FailureCode::ClassExists, "{why}");
    assert!(why.contains("class `any`"), "{why}");
    let classes = inbox.done(carmi.get_class_definitions()).await;
    assert!(
        matches!(&classes, Reply::Classes(c) if c.len() == 1 && c[0].expression == "true"),
        "{classes:?}"
    );
    let r = carmi.redefine_class("any", "Name =!= \"nowhere\"", None);
    assert_eq!(inbox.done(r).await, Reply::Ok);

    // Two hosts, a sleeping process on each.
    let add = carmi.addhosts("any", 2, 2);
    let (hosts, _) = inbox.hosts_added(add, 2).await;
    let exe = pool.dir.join("nap.sh");
    write_script(&exe, "#!/bin/sh\nsleep 300\n");
    let mut started = Vec::new();
    for &h in &hosts {
        let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(h));
        let p = inbox
            .take_within(Duration::from_secs(30), "process started", |x| match x {
                Incoming::Rm(Event::ProcessStarted {
                    request, process, ..
                }) if *request == spawn => Some(*process),
                _ => None,
            })
            .await;
        started.push((p, h));
    }

    // process_info of the whole application: the root and both workers.
    let Reply::Processes(list) = inbox.done(carmi.processes()).await else {
        panic!("Processes answers with Reply::Processes");
    };
    assert_eq!(list.len(), 3, "{list:?}");
    let root = list
        .iter()
        .find(|p| p.parent.is_none())
        .expect("the application's own process is listed");
    assert_eq!(root.host, None, "{list:?}");
    for (p, h) in &started {
        let info = list
            .iter()
            .find(|i| i.process == *p)
            .unwrap_or_else(|| panic!("process {p} missing from {list:?}"));
        assert_eq!(info.host, Some(*h));
        assert_eq!(info.parent, Some(root.process));
        assert_eq!(info.executable.as_deref(), Some("nap.sh"));
        assert_eq!(info.state, ProcessState::Running);
    }

    // delhosts answers with the hosts it freed.
    let gone = vec![hosts[1]];
    assert_eq!(
        inbox.done(carmi.delhosts(&gone)).await,
        Reply::HostsRemoved(gone)
    );
}
