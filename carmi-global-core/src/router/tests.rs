//! Router tests with virtual time: every output passes through the real frame
//! codec, every invariant is checked after every step, and each test ends
//! with nothing unexpected left to send.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::BytesMut;
use carmi_api::frame::{decode, encode_header};
use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{
    Event, ExecutableRef, ExitStatus, FailureCode, FromGlobal, ProcessInfo, ProcessState, Reply,
    Request, Role, SlotActivity, SpawnTarget, ToGlobal,
};

use super::{LinkId, Output, Router, RouterConfig};

const SUB: LinkId = LinkId(1);
const M1: LinkId = LinkId(2);
const M2: LinkId = LinkId(3);
const ROOT_CONN: ConnId = ConnId(1);

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "worker".into(),
        sha256: "ab".repeat(32),
        size: 1234,
    }
}

struct Sim {
    r: Router,
    now: Duration,
    out: VecDeque<Output>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            r: Router::new(RouterConfig::default()),
            now: Duration::ZERO,
            out: VecDeque::new(),
        }
    }

    fn sleep(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
    }

    fn step(&mut self, f: impl FnOnce(&mut Router, Duration)) {
        f(&mut self.r, self.now);
        for o in self.r.take_outputs() {
            // The journal's records are tested in `jobs_tests`.
            if matches!(o, Output::Journal(_)) {
                continue;
            }
            if let Output::Send { msg, .. } = &o {
                let mut buf = BytesMut::from(&encode_header(msg, 0)[..]);
                let (back, _): (FromGlobal, _) = decode(&mut buf, 1 << 24).unwrap().unwrap();
                assert_eq!(&back, msg, "message changed through the frame codec");
            }
            self.out.push_back(o);
        }
        self.r.sanity_check();
    }

    fn msg(&mut self, link: LinkId, msg: ToGlobal) {
        self.step(|r, now| r.on_message(link, msg, now));
    }

    fn next_send(&mut self, link: LinkId) -> FromGlobal {
        match self.out.pop_front() {
            Some(Output::Send { link: l, msg }) if l == link => msg,
            other => panic!(
                "expected a message on {link}, got {other:?}; then {:?}",
                self.out
            ),
        }
    }

    fn next_event(&mut self, link: LinkId, conn: ConnId) -> Event {
        match self.next_send(link) {
            FromGlobal::Deliver { conn: c, event } if c == conn => event,
            other => panic!("expected an event for {conn}, got {other:?}"),
        }
    }

    fn expect_closed(&mut self, link: LinkId) -> String {
        match self.out.pop_front() {
            Some(Output::Close { link: l, reason }) if l == link => reason,
            other => panic!("expected {link} closed, got {other:?}"),
        }
    }

    fn quiet(&self) {
        assert!(self.out.is_empty(), "unexpected outputs: {:?}", self.out);
    }

    /// Opens `link` as machine `name` and registers it.
    fn machine(&mut self, link: LinkId, name: &str, mips: u32, slots: u32) -> Vec<HostId> {
        let role = Role::Local { name: name.into() };
        self.step(|r, now| r.on_link_opened(link, role, now));
        self.msg(
            link,
            ToGlobal::Advertise {
                ad: format!("[ Name = \"{name}\"; Mips = {mips}; Arch = \"X86_64\" ]"),
                slots,
                running: vec![],
            },
        );
        match self.next_send(link) {
            FromGlobal::Registered {
                hosts,
                heartbeat_ms,
            } => {
                assert_eq!(heartbeat_ms, 1000);
                assert_eq!(hosts.len(), slots as usize);
                hosts
            }
            other => panic!("{other:?}"),
        }
    }

    /// A new job whose first process attaches at `SUB`/`ROOT_CONN`.
    fn root(&mut self) -> (JobId, ProcessId) {
        self.msg(
            SUB,
            ToGlobal::AppAttach {
                conn: ROOT_CONN,
                job: None,
                process: None,
                endpoint: "10.0.0.1:4000".into(),
                token: None,
            },
        );
        match self.next_send(SUB) {
            FromGlobal::Attached { conn, job, process } => {
                assert_eq!(conn, ROOT_CONN);
                (job, process)
            }
            other => panic!("{other:?}"),
        }
    }

    fn request(&mut self, id: u64, body: Request) {
        self.msg(
            SUB,
            ToGlobal::Forward {
                conn: ROOT_CONN,
                id: RequestId(id),
                body,
            },
        );
    }

    fn root_event(&mut self) -> Event {
        self.next_event(SUB, ROOT_CONN)
    }

    fn expect_done(&mut self, id: u64) -> Reply {
        match self.root_event() {
            Event::Done { request, reply } if request == RequestId(id) => reply,
            other => panic!("expected Done for r{id}, got {other:?}"),
        }
    }

    fn expect_failed(&mut self, id: u64, code: FailureCode) -> String {
        match self.root_event() {
            Event::Failed { request, failure }
                if request == RequestId(id) && failure.code == code =>
            {
                failure.message
            }
            other => panic!("expected Failed({code:?}) for r{id}, got {other:?}"),
        }
    }

    /// A job with class `c` (everything) holding `n` hosts.
    fn job_with_hosts(&mut self, n: u32) -> (JobId, ProcessId, Vec<HostId>) {
        let (job, root) = self.root();
        self.request(
            1,
            Request::DefineClass {
                name: "c".into(),
                expression: "Mips > 0".into(),
                rank: None,
                replace: false,
            },
        );
        self.expect_done(1);
        self.request(
            2,
            Request::AddHosts {
                class: "c".into(),
                count: n,
                increment: n,
            },
        );
        match self.root_event() {
            Event::HostsAdded {
                request: RequestId(2),
                hosts,
                remaining: 0,
            } => (job, root, hosts.iter().map(|h| h.host).collect()),
            other => panic!("{other:?}"),
        }
    }

    /// Spawns on `host` and lets its machine start it; returns the process.
    fn spawn_on(&mut self, id: u64, host: HostId, machine: LinkId) -> ProcessId {
        self.request(
            id,
            Request::ClassSpawn {
                executable: exe(),
                args: vec!["--fast".into()],
                target: SpawnTarget::Host(host),
                output: Default::default(),
            },
        );
        let process = match self.next_send(machine) {
            FromGlobal::Spawn {
                process,
                host: h,
                args,
                ..
            } => {
                assert_eq!(h, host);
                assert_eq!(args, vec!["--fast".to_string()]);
                process
            }
            other => panic!("{other:?}"),
        };
        self.msg(
            machine,
            ToGlobal::Started {
                process,
                result: Ok(()),
            },
        );
        assert_eq!(
            self.root_event(),
            Event::ProcessStarted {
                request: RequestId(id),
                process,
                host
            }
        );
        process
    }
}

fn sim_with_submit_machine() -> Sim {
    let mut s = Sim::new();
    // The submit machine runs a local RM too, but offers no slots.
    s.machine(SUB, "submit", 1, 0);
    s.r.on_executable_stored(&exe());
    s
}

#[test]
fn machines_register_and_keep_host_ids_across_reconnections() {
    let mut s = Sim::new();
    let hosts = s.machine(M1, "m1", 10, 2);
    assert_eq!(hosts, vec![HostId(1), HostId(2)]);
    let other = s.machine(M2, "m2", 10, 1);
    assert_eq!(other, vec![HostId(3)]);
    s.step(|r, now| r.on_link_closed(M1, now));
    let again = s.machine(LinkId(9), "m1", 10, 2);
    assert_eq!(again, hosts);
    // A second connection under the same name replaces the first.
    s.step(|r, now| r.on_link_opened(LinkId(10), Role::Local { name: "m2".into() }, now));
    let reason = s.expect_closed(M2);
    assert!(reason.contains("m2"), "{reason}");
    s.quiet();
}

#[test]
fn a_silent_machine_is_declared_lost_in_bounded_time() {
    let mut s = sim_with_submit_machine();
    let hosts = s.machine(M1, "m1", 10, 1);
    let (_, _, held) = s.job_with_hosts(1);
    assert_eq!(held, hosts);
    s.request(
        3,
        Request::DeleteNotify {
            hosts: held.clone(),
        },
    );
    s.expect_done(3);
    let p = s.spawn_on(4, held[0], M1);
    // Heartbeats keep it alive; the submit machine keeps talking too.
    for _ in 0..5 {
        s.sleep(1000);
        s.msg(
            M1,
            ToGlobal::Heartbeat {
                update: String::new(),
            },
        );
        s.msg(
            SUB,
            ToGlobal::Heartbeat {
                update: String::new(),
            },
        );
    }
    s.quiet();
    let silent_since = s.now;
    s.sleep(2000);
    s.msg(
        SUB,
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    s.step(|r, now| r.on_tick(now));
    s.quiet();
    assert_eq!(
        s.r.next_deadline(),
        Some(silent_since + Duration::from_millis(3000))
    );
    s.sleep(1000);
    s.step(|r, now| r.on_tick(now));
    match s.root_event() {
        Event::ProcessExited {
            request,
            process,
            status,
            ..
        } => {
            assert_eq!(
                (request, process, status),
                (RequestId(4), p, ExitStatus::HostLost)
            );
        }
        other => panic!("{other:?}"),
    }
    match s.root_event() {
        Event::HostDeleted {
            request,
            host,
            reason,
        } => {
            assert_eq!((request, host), (RequestId(3), held[0]));
            assert!(reason.contains("stopped answering"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let reason = s.expect_closed(M1);
    assert!(reason.contains("3000 ms"), "{reason}");
    s.quiet();
    assert!(!s.r.allocator().is_online("m1"));
    // It comes back: same host id, idle, and the process it still runs is killed.
    let role = Role::Local { name: "m1".into() };
    s.step(|r, now| r.on_link_opened(LinkId(20), role, now));
    s.msg(
        LinkId(20),
        ToGlobal::Advertise {
            ad: "[ Mips = 10 ]".into(),
            slots: 1,
            running: vec![p],
        },
    );
    assert!(
        matches!(s.next_send(LinkId(20)), FromGlobal::Registered { hosts, .. } if hosts == held)
    );
    assert_eq!(s.next_send(LinkId(20)), FromGlobal::Kill { process: p });
    s.quiet();
}

#[test]
fn spawned_processes_start_attach_are_looked_up_and_exit() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    let (job, root, hosts) = s.job_with_hosts(1);
    s.request(
        3,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Class("c".into()),
            output: Default::default(),
        },
    );
    let p = match s.next_send(M1) {
        FromGlobal::Spawn {
            process,
            job: j,
            host,
            ..
        } => {
            assert_eq!((j, host), (job, hosts[0]));
            process
        }
        other => panic!("{other:?}"),
    };
    s.request(4, Request::ProcessInfo { process: p });
    assert_eq!(
        s.expect_done(4),
        Reply::Process(ProcessInfo {
            process: p,
            host: Some(hosts[0]),
            state: ProcessState::Starting,
            parent: Some(root),
            executable: Some(exe().name),
        })
    );
    // A lookup before the process has connected waits for it.
    s.request(5, Request::LookupProcess { process: p });
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Started {
            process: p,
            result: Ok(()),
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::ProcessStarted {
            request: RequestId(3),
            ..
        }
    ));
    // The worker connects to its local RM.
    s.msg(
        M1,
        ToGlobal::AppAttach {
            conn: ConnId(5),
            job: Some(job),
            process: Some(p),
            endpoint: "10.0.0.2:5000".into(),
            token: None,
        },
    );
    assert_eq!(
        s.next_send(M1),
        FromGlobal::Attached {
            conn: ConnId(5),
            job,
            process: p
        }
    );
    assert_eq!(
        s.expect_done(5),
        Reply::Endpoint {
            process: p,
            address: "10.0.0.2:5000".into()
        }
    );
    s.request(6, Request::LookupProcess { process: p });
    assert_eq!(
        s.expect_done(6),
        Reply::Endpoint {
            process: p,
            address: "10.0.0.2:5000".into()
        }
    );
    // The worker can look up the master the same way.
    s.msg(
        M1,
        ToGlobal::Forward {
            conn: ConnId(5),
            id: RequestId(1),
            body: Request::LookupProcess { process: root },
        },
    );
    assert!(matches!(
        s.next_event(M1, ConnId(5)),
        Event::Done { reply: Reply::Endpoint { address, .. }, .. } if address == "10.0.0.1:4000"
    ));
    // The host is busy now.
    s.request(
        7,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Class("c".into()),
            output: Default::default(),
        },
    );
    s.expect_failed(7, FailureCode::Unavailable);
    // Only the machine it runs on may report its end.
    s.msg(
        SUB,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Code(0),
            cpu_seconds: 1.0,
            usage: Default::default(),
        },
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Code(3),
            cpu_seconds: 0.5,
            usage: Default::default(),
        },
    );
    assert_eq!(
        s.root_event(),
        Event::ProcessExited {
            request: RequestId(3),
            process: p,
            status: ExitStatus::Code(3),
            cpu_seconds: 0.5
        }
    );
    s.quiet();
}

#[test]
fn spawn_failures_say_what_to_do() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    let (_, _, hosts) = s.job_with_hosts(1);
    let mut other = exe();
    other.sha256 = "cd".repeat(32);
    s.request(
        3,
        Request::ClassSpawn {
            executable: other,
            args: vec![],
            target: SpawnTarget::Host(hosts[0]),
            output: Default::default(),
        },
    );
    let msg = s.expect_failed(3, FailureCode::BadExecutable);
    assert!(msg.contains("upload"), "{msg}");
    s.request(
        4,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Host(HostId(77)),
            output: Default::default(),
        },
    );
    s.expect_failed(4, FailureCode::NotYourHost);
    // A new connection that has not advertised yet is sent no work.
    let role = Role::Local { name: "m1".into() };
    s.step(|r, now| r.on_link_opened(LinkId(30), role, now));
    s.expect_closed(M1);
    s.request(
        8,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Host(hosts[0]),
            output: Default::default(),
        },
    );
    s.expect_failed(8, FailureCode::Unavailable);
    s.step(|r, now| r.on_link_closed(LinkId(30), now));
    s.request(
        5,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Host(hosts[0]),
            output: Default::default(),
        },
    );
    let msg = s.expect_failed(5, FailureCode::Unavailable);
    assert!(msg.contains("not connected"), "{msg}");
    s.request(
        6,
        Request::ProcessInfo {
            process: ProcessId(999),
        },
    );
    s.expect_failed(6, FailureCode::UnknownProcess);
    s.quiet();
}

#[test]
fn failed_starts_and_vacated_hosts_end_processes() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 2);
    let (_, _, hosts) = s.job_with_hosts(2);
    s.request(
        3,
        Request::ClassSpawn {
            executable: exe(),
            args: vec![],
            target: SpawnTarget::Host(hosts[0]),
            output: Default::default(),
        },
    );
    let FromGlobal::Spawn { process: p, .. } = s.next_send(M1) else {
        panic!()
    };
    s.request(9, Request::LookupProcess { process: p });
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Started {
            process: p,
            result: Err("no such file".into()),
        },
    );
    let msg = s.expect_failed(9, FailureCode::Unavailable);
    assert!(msg.contains("exited"), "{msg}");
    assert!(matches!(
        s.root_event(),
        Event::ProcessExited { status: ExitStatus::FailedToStart(r), .. } if r == "no such file"
    ));
    let q = s.spawn_on(4, hosts[1], M1);
    s.msg(
        M1,
        ToGlobal::SlotState {
            slot: 1,
            state: SlotActivity::Suspended,
        },
    );
    s.request(5, Request::ProcessInfo { process: q });
    assert!(matches!(
        s.expect_done(5),
        Reply::Process(ProcessInfo {
            state: ProcessState::Suspended,
            ..
        })
    ));
    s.msg(
        M1,
        ToGlobal::SlotState {
            slot: 1,
            state: SlotActivity::Vacated,
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::ProcessExited { process, status: ExitStatus::HostLost, .. } if process == q
    ));
    // The local RM's own report of the kill is old news.
    s.msg(
        M1,
        ToGlobal::Exited {
            process: q,
            status: ExitStatus::Signal(9),
            cpu_seconds: 0.0,
            usage: Default::default(),
        },
    );
    s.request(6, Request::Config);
    assert!(matches!(s.expect_done(6), Reply::Hosts(h) if h.len() == 1 && h[0].host == hosts[0]));
    s.quiet();
}

#[path = "cut_off_tests.rs"]
mod cut_off;
#[path = "links_tests.rs"]
mod links;
#[path = "lost_tests.rs"]
mod lost;
#[path = "spec_api_tests.rs"]
mod spec_api;
