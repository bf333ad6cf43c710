//! Router tests with virtual time: every output passes through the real frame
//! codec, every invariant is checked after every step, and each test ends
//! with nothing unexpected left to send.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::BytesMut;
use carmi_api::frame::{decode, encode_header};
use carmi_api::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
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
            state: ProcessState::Starting
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
        },
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Code(3),
            cpu_seconds: 0.5,
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
        },
    );
    s.request(6, Request::Config);
    assert!(matches!(s.expect_done(6), Reply::Hosts(h) if h.len() == 1 && h[0].host == hosts[0]));
    s.quiet();
}

#[test]
fn del_hosts_kills_and_the_first_process_leaving_ends_the_job() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 2);
    let (job, _, hosts) = s.job_with_hosts(2);
    let p = s.spawn_on(3, hosts[0], M1);
    let q = s.spawn_on(4, hosts[1], M1);
    s.request(
        5,
        Request::DelHosts {
            hosts: vec![hosts[0]],
        },
    );
    assert_eq!(s.next_send(M1), FromGlobal::Kill { process: p });
    s.expect_done(5);
    s.msg(
        M1,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Signal(15),
            cpu_seconds: 0.1,
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::ProcessExited {
            status: ExitStatus::Signal(15),
            ..
        }
    ));
    s.msg(SUB, ToGlobal::AppDetach { conn: ROOT_CONN });
    assert_eq!(s.next_send(M1), FromGlobal::Kill { process: q });
    s.quiet();
    assert!(!s.r.allocator().has_job(job));
    assert!(s.r.processes().is_empty());
    let status = s.r.allocator().pool_status();
    let m1 = status.iter().find(|m| m.name == "m1").unwrap();
    assert!(
        m1.slots
            .iter()
            .all(|sl| sl.state == "idle" && sl.job.is_none())
    );
}

#[test]
fn links_are_served_by_role() {
    let mut s = Sim::new();
    s.machine(M1, "m1", 10, 1);
    s.step(|r, now| r.on_link_opened(LinkId(5), Role::Admin, now));
    s.msg(LinkId(5), ToGlobal::Status);
    match s.next_send(LinkId(5)) {
        FromGlobal::Pool(machines) => {
            assert_eq!(machines.len(), 1);
            assert!(
                machines[0]
                    .attributes
                    .contains(&("Mips".into(), "10".into()))
            );
            assert_eq!(machines[0].slots[0].state, "idle");
        }
        other => panic!("{other:?}"),
    }
    s.msg(
        LinkId(5),
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    assert!(s.expect_closed(LinkId(5)).contains("Status"));
    let app = Role::Application {
        job: None,
        process: None,
        endpoint: "x:1".into(),
    };
    s.step(|r, now| r.on_link_opened(LinkId(6), app, now));
    assert!(s.expect_closed(LinkId(6)).contains("local RM"));
    // A request from a connection that never attached.
    s.msg(
        M1,
        ToGlobal::Forward {
            conn: ConnId(4),
            id: RequestId(8),
            body: Request::Config,
        },
    );
    assert!(matches!(
        s.next_event(M1, ConnId(4)),
        Event::Failed { request: RequestId(8), failure } if failure.code == FailureCode::UnknownProcess
    ));
    // Bad ads and absurd slot counts close the connection with a reason.
    s.msg(
        M1,
        ToGlobal::Advertise {
            ad: "[ Mips = ]".into(),
            slots: 1,
            running: vec![],
        },
    );
    assert!(
        matches!(s.next_send(M1), FromGlobal::AdminFailed(f) if f.message.contains("does not parse"))
    );
    assert!(s.expect_closed(M1).contains("does not parse"));
    s.msg(
        M1,
        ToGlobal::Advertise {
            ad: "[]".into(),
            slots: 1 << 30,
            running: vec![],
        },
    );
    assert!(s.expect_closed(M1).contains("slots"));
    s.quiet();
}

#[test]
fn heartbeat_updates_reach_the_allocator() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    let (_, _) = s.root();
    s.request(
        1,
        Request::DefineClass {
            name: "calm".into(),
            expression: "LoadAvg < 0.5".into(),
            rank: None,
        },
    );
    s.expect_done(1);
    s.request(
        2,
        Request::AddHosts {
            class: "calm".into(),
            count: 1,
            increment: 1,
        },
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "LoadAvg = ".into(),
        },
    );
    assert!(
        matches!(s.next_send(M1), FromGlobal::AdminFailed(f) if f.message.contains("does not parse"))
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "LoadAvg = 0.1".into(),
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::HostsAdded {
            request: RequestId(2),
            remaining: 0,
            ..
        }
    ));
    s.quiet();
}

/// Random messages, many of them nonsense (unknown hosts, processes, slots,
/// connections), from several machines: the router never panics and every
/// invariant holds after every step.
#[test]
fn random_messages_never_break_the_router() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let mut rng = StdRng::seed_from_u64(7);
    let mut s = sim_with_submit_machine();
    let names = ["m1", "m2", "m3"];
    let mut next_link = 100;
    let mut links = vec![(SUB, "submit")];
    for (i, n) in names.iter().enumerate() {
        let link = LinkId(10 + i as u64);
        s.machine(link, n, 10 * (i as u32 + 1), 2);
        links.push((link, n));
    }
    s.root();
    for _ in 0..4000 {
        s.sleep(rng.random_range(0..400));
        let (link, name) = links[rng.random_range(0..links.len())];
        let conn = ConnId(rng.random_range(0..4));
        let host = HostId(rng.random_range(0..9));
        let process = ProcessId(rng.random_range(0..12));
        let id = RequestId(rng.random_range(0..30));
        let class = ["c", "d", "zz"][rng.random_range(0..3)].to_string();
        let body = match rng.random_range(0..17) {
            0 => Request::CancelRequest { request: id },
            1 => Request::Config,
            2 => Request::GetHostInfo { host },
            3 | 4 => Request::AddHosts {
                class,
                count: rng.random_range(0..4),
                increment: rng.random_range(0..3),
            },
            5 => Request::DelHosts { hosts: vec![host] },
            6 => Request::AddNotify { class },
            7 => Request::DeleteNotify { hosts: vec![host] },
            8 => Request::SuspendNotify { hosts: vec![host] },
            9 => Request::ResumeNotify { hosts: vec![host] },
            10 => Request::ClassSpawn {
                executable: exe(),
                args: vec![],
                target: if rng.random_bool(0.5) {
                    SpawnTarget::Class(class)
                } else {
                    SpawnTarget::Host(host)
                },
                output: Default::default(),
            },
            11 => Request::ProcessInfo { process },
            12 => Request::GetClassDefinitions,
            13 => Request::DefineClass {
                name: class,
                expression: ["true", "Mips > 15", "Mips >", ""][rng.random_range(0..4)].into(),
                rank: None,
            },
            14 => Request::RemoveClass { name: class },
            15 => Request::ExcludeHosts {
                class,
                hosts: vec![host],
            },
            _ => Request::LookupProcess { process },
        };
        let msg = match rng.random_range(0..14) {
            0 => ToGlobal::Heartbeat {
                update: ["", "LoadAvg = 0.5", "Mips = 99", "= ="][rng.random_range(0..4)].into(),
            },
            1 => ToGlobal::AppAttach {
                conn,
                job: [None, Some(JobId(1)), Some(JobId(rng.random_range(0..5)))]
                    [rng.random_range(0..3)],
                process: [None, Some(process)][rng.random_range(0..2)],
                endpoint: "e:1".into(),
            },
            2 => ToGlobal::AppDetach { conn },
            3 => ToGlobal::Started {
                process,
                result: if rng.random_bool(0.8) {
                    Ok(())
                } else {
                    Err("no".into())
                },
            },
            4 => ToGlobal::Exited {
                process,
                status: ExitStatus::Code(1),
                cpu_seconds: 0.0,
            },
            5 => ToGlobal::SlotState {
                slot: rng.random_range(0..3),
                state: [
                    SlotActivity::Available,
                    SlotActivity::Suspended,
                    SlotActivity::Vacated,
                ][rng.random_range(0..3)],
            },
            6 => ToGlobal::Advertise {
                ad: "[ Mips = 12 ]".into(),
                slots: rng.random_range(0..4),
                running: vec![process],
            },
            7 => ToGlobal::Status,
            _ => ToGlobal::Forward { conn, id, body },
        };
        if rng.random_range(0..100) == 0 {
            // A reconnection under the same name.
            let new = LinkId(next_link);
            next_link += 1;
            let role = Role::Local { name: name.into() };
            s.step(|r, now| r.on_link_opened(new, role, now));
            for l in links.iter_mut().filter(|(_, n)| *n == name) {
                l.0 = new;
            }
        }
        s.msg(link, msg);
        if rng.random_range(0..10) == 0 {
            s.step(|r, now| r.on_tick(now));
        }
        s.out.clear();
    }
}

/// What carmi-local does after losing the global RM for a moment: advertise
/// again with what still runs, replay its backlog (`Exited` of processes that
/// ended meanwhile), announce its applications again under their ids, then
/// heartbeat.
#[test]
fn a_reconnecting_local_rm_keeps_its_jobs_and_its_processes_exit_codes() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 3);
    let (job, root, hosts) = s.job_with_hosts(3);
    let ended = s.spawn_on(3, hosts[0], M1);
    let vanished = s.spawn_on(4, hosts[1], M1);
    let alive = s.spawn_on(5, hosts[2], M1);
    // Both connections drop and come back within the heartbeat window.
    s.step(|r, now| r.on_link_closed(M1, now));
    s.step(|r, now| r.on_link_closed(SUB, now));
    s.sleep(500);
    let (m1, sub) = (LinkId(40), LinkId(41));
    for (link, name) in [(m1, "m1"), (sub, "submit")] {
        let role = Role::Local { name: name.into() };
        s.step(|r, now| r.on_link_opened(link, role, now));
    }
    s.msg(
        sub,
        ToGlobal::Advertise {
            ad: "[]".into(),
            slots: 0,
            running: vec![],
        },
    );
    assert!(matches!(s.next_send(sub), FromGlobal::Registered { .. }));
    s.msg(
        sub,
        ToGlobal::AppAttach {
            conn: ROOT_CONN,
            job: Some(job),
            process: Some(root),
            endpoint: "10.0.0.1:4000".into(),
        },
    );
    assert_eq!(
        s.next_send(sub),
        FromGlobal::Attached {
            conn: ROOT_CONN,
            job,
            process: root
        }
    );
    s.msg(
        m1,
        ToGlobal::Advertise {
            ad: "[ Mips = 10 ]".into(),
            slots: 3,
            running: vec![alive],
        },
    );
    assert!(matches!(s.next_send(m1), FromGlobal::Registered { hosts: h, .. } if h == hosts));
    s.quiet();
    // The backlog tells how `ended` ended; `vanished` is explained by nothing.
    s.msg(
        m1,
        ToGlobal::Exited {
            process: ended,
            status: ExitStatus::Code(4),
            cpu_seconds: 2.0,
        },
    );
    assert_eq!(
        s.next_event(sub, ROOT_CONN),
        Event::ProcessExited {
            request: RequestId(3),
            process: ended,
            status: ExitStatus::Code(4),
            cpu_seconds: 2.0
        }
    );
    s.msg(
        m1,
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    assert!(matches!(
        s.next_event(sub, ROOT_CONN),
        Event::ProcessExited { process, status: ExitStatus::HostLost, .. } if process == vanished
    ));
    s.quiet();
    assert!(s.r.allocator().has_job(job));
    assert_eq!(s.r.allocator().job_hosts(job), hosts);
    assert!(s.r.processes().find(alive).is_some_and(|p| p.is_live()));
}

#[path = "lost_tests.rs"]
mod lost;
