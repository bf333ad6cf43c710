//! Tests of the core alone: inputs in, effects out, every message through
//! the real serde encoding, invariants checked after every step.

use super::*;
use carmi_proto::ids::RequestId;
use carmi_proto::msg::{Event, ExitStatus, Request};

/// Owns a core and checks it after every step; effects are round-tripped
/// through the wire encoding so that the tests see what a peer would.
struct Harness {
    core: Core,
    pending: VecDeque<Effect>,
}

fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(msg: &T) -> T {
    // A frame's header is this JSON (`carmi_api::frame`); the framing
    // itself does I/O and stays out of this crate.
    serde_json::from_slice(&serde_json::to_vec(msg).unwrap()).unwrap()
}

fn exe(name: &str, sha_digit: char) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: std::iter::repeat_n(sha_digit, 64).collect(),
        size: 10,
    }
}

fn spawn(process: u64, host: u64, executable: ExecutableRef) -> FromGlobal {
    FromGlobal::Spawn {
        process: ProcessId(process),
        job: JobId(1),
        host: HostId(host),
        executable,
        args: vec!["a".into()],
        output: Default::default(),
        requests: ASKED,
    }
}

/// What the spawns' job asked for: each launch carries it to its cgroup.
const ASKED: carmi_proto::msg::Requests = carmi_proto::msg::Requests {
    memory_mib: Some(100),
    cpus: Some(2),
};

impl Harness {
    fn new(slots: u32) -> Harness {
        Harness {
            core: Core::new(slots),
            pending: VecDeque::new(),
        }
    }

    fn step(&mut self, f: impl FnOnce(&mut Core)) {
        f(&mut self.core);
        self.core.sanity_check();
        for e in self.core.take_effects() {
            self.pending.push_back(match e {
                Effect::ToGlobal(m, p) => Effect::ToGlobal(wire(&m), p),
                Effect::ToApp(c, m) => Effect::ToApp(c, wire(&m)),
                other => other,
            });
        }
    }

    fn global(&mut self, msg: FromGlobal) {
        let msg = wire(&msg);
        self.step(|c| c.on_global(msg, Bytes::new()));
    }

    fn next(&mut self) -> Effect {
        self.pending.pop_front().expect("an effect was expected")
    }

    fn next_to_global(&mut self) -> ToGlobal {
        match self.next() {
            Effect::ToGlobal(m, _) => m,
            other => panic!("expected a message to the global RM, got {other:?}"),
        }
    }

    fn take(&mut self, n: usize) -> Vec<Effect> {
        (0..n).map(|_| self.next()).collect()
    }

    fn nothing_else(&mut self) {
        assert!(
            self.pending.is_empty(),
            "unexpected effects: {:?}",
            self.pending
        );
    }

    /// Connects and registers with slot hosts 100, 101, ...
    fn register(&mut self) {
        self.step(|c| c.on_global_connected("[ Name = \"m\" ]".into()));
        assert!(matches!(self.next_to_global(), ToGlobal::Advertise { .. }));
        let hosts = (0..self.core.slots())
            .map(|i| HostId(100 + u64::from(i)))
            .collect();
        self.global(FromGlobal::Registered {
            hosts,
            heartbeat_ms: 1000,
        });
    }

    /// Spawns `process` with a cached executable and reports it running.
    fn run(&mut self, process: u64, host: u64) {
        self.global(spawn(process, host, exe("w", 'a')));
        assert!(matches!(self.next(), Effect::Launch(l) if l.process == ProcessId(process)));
        self.step(|c| c.on_launched(ProcessId(process), Ok(())));
        assert_eq!(
            self.next_to_global(),
            ToGlobal::Started {
                process: ProcessId(process),
                result: Ok(())
            }
        );
    }
}

#[test]
fn advertise_lists_slots_and_registration_enables_traffic() {
    let mut h = Harness::new(2);
    h.step(|c| c.on_global_connected("[ a = 1 ]".into()));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Advertise {
            ad: "[ a = 1 ]".into(),
            slots: 2,
            running: vec![]
        }
    );
    // Before Registered, nothing else is acted on.
    h.global(spawn(1, 100, exe("w", 'a')));
    h.step(|c| c.on_heartbeat("LoadAvg = 1.0\n".into()));
    h.nothing_else();
    h.global(FromGlobal::Registered {
        hosts: vec![HostId(100), HostId(101)],
        heartbeat_ms: 1000,
    });
    h.step(|c| c.on_heartbeat("LoadAvg = 1.0\n".into()));
    assert!(matches!(h.next_to_global(), ToGlobal::Heartbeat { .. }));
    h.nothing_else();
}

#[test]
fn application_attach_forward_and_deliver() {
    let mut h = Harness::new(1);
    h.register();
    let conn = ConnId(5);
    h.step(|c| c.on_app_connected(conn, None, None, "127.0.0.1:7000".into()));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::AppAttach {
            conn,
            job: None,
            process: None,
            endpoint: "127.0.0.1:7000".into(),
            token: None,
        }
    );
    h.global(FromGlobal::Attached {
        conn,
        job: JobId(9),
        process: ProcessId(1),
    });
    assert_eq!(
        h.next(),
        Effect::ToApp(
            conn,
            FromLocal::Attached {
                job: JobId(9),
                process: ProcessId(1)
            }
        )
    );
    h.step(|c| c.on_app_request(conn, RequestId(1), Request::Config));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Forward {
            conn,
            id: RequestId(1),
            body: Request::Config
        }
    );
    let event = Event::Done {
        request: RequestId(1),
        reply: carmi_proto::msg::Reply::Ok,
    };
    h.global(FromGlobal::Deliver {
        conn,
        event: event.clone(),
    });
    assert_eq!(
        h.next(),
        Effect::ToApp(conn, FromLocal::Event(event.clone()))
    );
    // Uploads pass through with their payload untouched.
    let payload = Bytes::from_static(b"\x7fELF...");
    h.step(|c| c.on_app_upload(conn, exe("w", 'b'), payload.clone()));
    assert_eq!(
        h.next(),
        Effect::ToGlobal(
            ToGlobal::Upload {
                executable: exe("w", 'b')
            },
            payload
        )
    );
    h.step(|c| c.on_app_closed(conn));
    assert_eq!(h.next_to_global(), ToGlobal::AppDetach { conn });
    // Events for a closed connection go nowhere.
    h.global(FromGlobal::Deliver { conn, event });
    h.nothing_else();
}

#[test]
fn spawn_fetches_a_missing_executable_once_for_all_waiters() {
    let mut h = Harness::new(2);
    h.register();
    h.global(spawn(1, 100, exe("w", 'a')));
    h.global(spawn(2, 101, exe("w", 'a')));
    let launches = h.take(2);
    assert!(launches.iter().all(|e| matches!(e, Effect::Launch(_))));
    h.step(|c| c.on_cache_miss(ProcessId(1)));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Fetch {
            sha256: exe("w", 'a').sha256
        }
    );
    h.step(|c| c.on_cache_miss(ProcessId(2)));
    h.nothing_else();
    // The bytes are checked against what the spawn said, whatever the sender claims.
    let mut claimed = exe("w", 'a');
    claimed.size = 99;
    let payload = Bytes::from_static(b"0123456789");
    h.step(|c| {
        c.on_global(
            FromGlobal::Executable {
                executable: claimed,
            },
            payload.clone(),
        )
    });
    assert_eq!(
        h.next(),
        Effect::Store {
            executable: exe("w", 'a'),
            payload
        }
    );
    h.step(|c| c.on_stored(&exe("w", 'a').sha256, Ok(())));
    let relaunch = h.take(2);
    assert!(
        relaunch
            .iter()
            .all(|e| matches!(e, Effect::Launch(l) if l.requests == ASKED))
    );
    h.step(|c| c.on_launched(ProcessId(1), Ok(())));
    h.step(|c| c.on_launched(ProcessId(2), Err("exec failed".into())));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Started {
            process: ProcessId(1),
            result: Ok(())
        }
    );
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Started {
            process: ProcessId(2),
            result: Err("exec failed".into())
        }
    );
    let usage = carmi_proto::msg::ProcessUsage {
        memory_peak_kib: 4096,
        memory_exceeded_mib: None,
    };
    h.step(|c| c.on_exited_with(ProcessId(1), ExitStatus::Code(0), 0.5, usage));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Exited {
            process: ProcessId(1),
            status: ExitStatus::Code(0),
            cpu_seconds: 0.5,
            usage,
        }
    );
    h.nothing_else();
    assert!(h.core.running().is_empty());
}

#[test]
fn bad_or_unknown_executables_fail_every_waiting_spawn() {
    let mut h = Harness::new(2);
    h.register();
    h.global(spawn(1, 100, exe("w", 'c')));
    h.global(spawn(2, 100, exe("w", 'c')));
    h.take(2);
    h.step(|c| c.on_cache_miss(ProcessId(1)));
    h.step(|c| c.on_cache_miss(ProcessId(2)));
    assert!(matches!(h.next_to_global(), ToGlobal::Fetch { .. }));
    h.nothing_else();
    h.global(FromGlobal::Executable {
        executable: exe("w", 'c'),
    });
    assert!(matches!(h.next(), Effect::Store { .. }));
    h.step(|c| c.on_stored(&exe("w", 'c').sha256, Err("hash mismatch".into())));
    for p in [1, 2] {
        assert_eq!(
            h.next_to_global(),
            ToGlobal::Started {
                process: ProcessId(p),
                result: Err("hash mismatch".into())
            }
        );
    }
    h.global(spawn(3, 100, exe("w", 'd')));
    h.next();
    h.step(|c| c.on_cache_miss(ProcessId(3)));
    h.next();
    h.global(FromGlobal::NoExecutable {
        sha256: exe("w", 'd').sha256,
    });
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::Started { result: Err(r), .. } if r.contains("no executable")
    ));
    // Bytes nobody asked for are not stored.
    h.global(FromGlobal::Executable {
        executable: exe("w", 'e'),
    });
    h.nothing_else();
}

#[test]
fn spawns_on_foreign_hosts_or_with_bad_hashes_are_refused() {
    let mut h = Harness::new(1);
    h.register();
    h.global(spawn(1, 555, exe("w", 'a')));
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::Started { result: Err(r), .. } if r.contains("h555")
    ));
    let mut bad = exe("w", 'a');
    bad.sha256 = "../../etc/passwd".into();
    h.global(spawn(2, 100, bad));
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::Started { result: Err(r), .. } if r.contains("SHA-256")
    ));
    // A duplicate spawn does not disturb the first.
    h.run(3, 100);
    h.global(spawn(3, 100, exe("w", 'a')));
    h.nothing_else();
    assert_eq!(h.core.running(), vec![ProcessId(3)]);
}

#[test]
fn kill_in_every_state() {
    let mut h = Harness::new(1);
    h.register();
    // Running: one Kill effect, even if asked twice.
    h.run(1, 100);
    h.global(FromGlobal::Kill {
        process: ProcessId(1),
    });
    h.global(FromGlobal::Kill {
        process: ProcessId(1),
    });
    assert_eq!(h.take(1), vec![Effect::Kill(ProcessId(1))]);
    h.nothing_else();
    // Launching: killed as soon as it has started.
    h.global(spawn(2, 100, exe("w", 'a')));
    h.next();
    h.global(FromGlobal::Kill {
        process: ProcessId(2),
    });
    h.step(|c| c.on_launched(ProcessId(2), Ok(())));
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::Started { result: Ok(()), .. }
    ));
    assert_eq!(h.next(), Effect::Kill(ProcessId(2)));
    // Fetching: never started, and the fetch is forgotten.
    h.global(spawn(3, 100, exe("w", 'f')));
    h.next();
    h.step(|c| c.on_cache_miss(ProcessId(3)));
    h.next();
    h.global(FromGlobal::Kill {
        process: ProcessId(3),
    });
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::Started { result: Err(r), .. } if r.contains("killed")
    ));
    // Unknown: ignored.
    h.global(FromGlobal::Kill {
        process: ProcessId(77),
    });
    h.nothing_else();
}

#[test]
fn losing_the_global_rm_keeps_processes_and_reports_later() {
    let mut h = Harness::new(2);
    h.register();
    h.run(1, 100);
    h.run(2, 101);
    let conn = ConnId(1);
    h.step(|c| c.on_app_connected(conn, Some(JobId(1)), Some(ProcessId(1)), "e".into()));
    h.next();
    h.global(FromGlobal::Attached {
        conn,
        job: JobId(1),
        process: ProcessId(1),
    });
    h.next();
    // An exit was handed to the link but never written; a heartbeat too.
    h.step(|c| c.on_exited(ProcessId(2), ExitStatus::Code(1), 0.25));
    let exited = h.next_to_global();
    h.step(|c| {
        c.on_global_lost(vec![
            (exited.clone(), Bytes::new()),
            (
                ToGlobal::Heartbeat {
                    update: String::new(),
                },
                Bytes::new(),
            ),
            (
                ToGlobal::Forward {
                    conn,
                    id: RequestId(4),
                    body: Request::Config,
                },
                Bytes::new(),
            ),
        ])
    });
    // The forwarded request that never left, and one made while away, are
    // held (no error for the application to handle), exits are kept,
    // processes live on.
    h.step(|c| c.on_app_request(conn, RequestId(5), Request::Config));
    h.step(|c| c.on_heartbeat("LoadAvg = 2\n".into()));
    h.nothing_else();
    assert_eq!(h.core.backlog_len(), 1);
    // Back: the advertisement lists the survivor, then the backlog and the re-attach follow.
    h.step(|c| c.on_global_connected("[ ]".into()));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Advertise {
            ad: "[ ]".into(),
            slots: 2,
            running: vec![ProcessId(1)]
        }
    );
    h.nothing_else();
    h.global(FromGlobal::Registered {
        hosts: vec![HostId(200), HostId(201)],
        heartbeat_ms: 1000,
    });
    assert_eq!(h.next_to_global(), exited);
    assert_eq!(
        h.next_to_global(),
        ToGlobal::AppAttach {
            conn,
            job: Some(JobId(1)),
            process: Some(ProcessId(1)),
            endpoint: "e".into(),
            token: None,
        }
    );
    for id in [4, 5] {
        assert_eq!(
            h.next_to_global(),
            ToGlobal::Forward {
                conn,
                id: RequestId(id),
                body: Request::Config
            }
        );
    }
    h.nothing_else();
    // The application already knows who it is: no second Attached.
    h.global(FromGlobal::Attached {
        conn,
        job: JobId(1),
        process: ProcessId(1),
    });
    h.nothing_else();
    // A process that exits now is reported at once.
    h.step(|c| c.on_exited(ProcessId(1), ExitStatus::Signal(9), 1.0));
    assert!(matches!(h.next_to_global(), ToGlobal::Exited { .. }));
    h.nothing_else();
}

#[test]
fn pending_fetches_are_asked_again_after_reconnecting() {
    let mut h = Harness::new(1);
    h.register();
    h.global(spawn(1, 100, exe("w", 'a')));
    h.next();
    h.step(|c| c.on_cache_miss(ProcessId(1)));
    assert!(matches!(h.next_to_global(), ToGlobal::Fetch { .. }));
    h.step(|c| c.on_global_lost(vec![]));
    h.register();
    assert_eq!(
        h.next_to_global(),
        ToGlobal::Fetch {
            sha256: exe("w", 'a').sha256
        }
    );
    h.nothing_else();
}

#[test]
fn applications_connecting_while_away_are_announced_on_registration() {
    let mut h = Harness::new(1);
    h.step(|c| c.on_app_connected(ConnId(1), None, None, "e".into()));
    h.nothing_else();
    h.register();
    assert!(matches!(
        h.next_to_global(),
        ToGlobal::AppAttach {
            conn: ConnId(1),
            ..
        }
    ));
    h.nothing_else();
}

#[test]
fn suspending_a_slot_stops_its_processes_and_is_reported() {
    let mut h = Harness::new(2);
    h.register();
    h.run(1, 100);
    h.run(2, 101);
    h.step(|c| assert!(c.suspend_slot(1)));
    assert_eq!(h.next(), Effect::Suspend(ProcessId(2)));
    assert_eq!(
        h.next_to_global(),
        ToGlobal::SlotState {
            slot: 1,
            state: SlotActivity::Suspended
        }
    );
    // Suspending again changes nothing.
    h.step(|c| assert!(c.suspend_slot(1)));
    h.nothing_else();
    h.step(|c| assert!(!c.suspend_slot(2)));
    // A process started on a suspended slot is stopped at once.
    h.global(spawn(3, 101, exe("w", 'a')));
    h.next();
    h.step(|c| c.on_launched(ProcessId(3), Ok(())));
    h.next();
    assert_eq!(h.next(), Effect::Suspend(ProcessId(3)));
    // The state survives a reconnection.
    h.step(|c| c.on_global_lost(vec![]));
    h.register();
    assert_eq!(
        h.next_to_global(),
        ToGlobal::SlotState {
            slot: 1,
            state: SlotActivity::Suspended
        }
    );
    h.step(|c| assert!(c.resume_slot(1)));
    let effects = h.take(3);
    assert!(effects.contains(&Effect::Resume(ProcessId(2))));
    assert!(effects.contains(&Effect::Resume(ProcessId(3))));
    assert!(effects.contains(&Effect::ToGlobal(
        ToGlobal::SlotState {
            slot: 1,
            state: SlotActivity::Available
        },
        Bytes::new()
    )));
    h.nothing_else();
}

fn slot_state(slot: u32, state: SlotActivity) -> Effect {
    Effect::ToGlobal(ToGlobal::SlotState { slot, state }, Bytes::new())
}

#[test]
fn no_process_starts_while_the_owner_policy_says_no() {
    let mut h = Harness::new(1);
    h.register();
    h.step(|c| {
        c.set_accepting(false);
        c.close_all();
    });
    assert_eq!(h.next(), slot_state(0, SlotActivity::Vacated));
    h.global(spawn(1, 100, exe("w", 'a')));
    match h.next_to_global() {
        ToGlobal::Started {
            process,
            result: Err(reason),
        } => {
            assert_eq!(process, ProcessId(1));
            assert!(reason.contains("START is false"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(h.core.job_count(), 0);
    h.step(|c| {
        c.set_accepting(true);
        c.open_all();
    });
    assert_eq!(h.next(), slot_state(0, SlotActivity::Available));
    h.run(2, 100);
    h.nothing_else();
}

#[test]
fn suspend_all_and_resume_all_signal_every_process() {
    let mut h = Harness::new(2);
    h.register();
    h.run(1, 100);
    h.run(2, 101);
    h.step(|c| c.suspend_all());
    let e = h.take(4);
    assert!(e.contains(&Effect::Suspend(ProcessId(1))));
    assert!(e.contains(&Effect::Suspend(ProcessId(2))));
    assert!(e.contains(&slot_state(0, SlotActivity::Suspended)));
    assert!(e.contains(&slot_state(1, SlotActivity::Suspended)));
    h.nothing_else();
    h.step(|c| c.resume_all());
    let e = h.take(4);
    assert!(e.contains(&Effect::Resume(ProcessId(1))));
    assert!(e.contains(&Effect::Resume(ProcessId(2))));
    assert!(e.contains(&slot_state(1, SlotActivity::Available)));
    h.nothing_else();
}

#[test]
fn vacate_terminates_running_processes_and_drops_unstarted_ones() {
    let mut h = Harness::new(2);
    h.register();
    h.run(1, 100);
    h.step(|c| c.suspend_all());
    h.take(3);
    // One more still launching, one waiting for its executable.
    h.global(spawn(2, 101, exe("w", 'a')));
    h.next();
    h.global(spawn(3, 101, exe("v", 'b')));
    h.next();
    h.step(|c| c.on_cache_miss(ProcessId(3)));
    assert!(matches!(h.next_to_global(), ToGlobal::Fetch { .. }));
    assert_eq!(h.core.job_count(), 3);
    h.step(|c| c.vacate_all());
    let e = h.take(5);
    assert!(e.contains(&slot_state(0, SlotActivity::Vacated)));
    assert!(e.contains(&slot_state(1, SlotActivity::Vacated)));
    assert!(e.contains(&Effect::Terminate(ProcessId(1))));
    // Told, so that the end of a vacated master is no end of its job.
    let vacating = ToGlobal::Vacating {
        process: ProcessId(1),
    };
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::ToGlobal(m, _) if *m == vacating)),
        "{e:?}"
    );
    assert!(e.iter().any(|e| matches!(
        e,
        Effect::ToGlobal(
            ToGlobal::Started {
                process: ProcessId(3),
                result: Err(_)
            },
            _
        )
    )));
    h.nothing_else();
    // The launching one is killed as soon as it runs.
    h.step(|c| c.on_launched(ProcessId(2), Ok(())));
    h.next_to_global();
    assert_eq!(h.next(), Effect::Kill(ProcessId(2)));
    h.step(|c| c.kill_all());
    let e = h.take(2);
    assert!(e.contains(&Effect::KillNow(ProcessId(1))));
    assert!(e.contains(&Effect::KillNow(ProcessId(2))));
    h.step(|c| c.on_exited(ProcessId(1), ExitStatus::Signal(9), 0.0));
    h.step(|c| c.on_exited(ProcessId(2), ExitStatus::Signal(9), 0.0));
    h.take(2);
    assert_eq!(h.core.job_count(), 0);
    h.nothing_else();
}

#[path = "node_stage_tests.rs"]
mod stage;

#[path = "node_time_tests.rs"]
mod time;
