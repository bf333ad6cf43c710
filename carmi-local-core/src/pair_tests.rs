//! A local RM's core and its link's decisions ([`Outbox`], [`Reconnect`])
//! against a scripted global RM, in virtual time, in the manner of
//! quinn-proto's test `Pair`: every message crosses as its wire form (JSON,
//! a frame's header) and the session's bounded queue sits between the two,
//! so that what a global RM that stops reading costs can be watched end to end.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use carmi_proto::ids::{HostId, JobId, ProcessId};
use carmi_proto::msg::{ExecutableRef, FromGlobal, ToGlobal};

use crate::link::{LinkOutput, Outbox, Reconnect, Route};
use crate::node::{Core, Effect};

fn wire<T: serde::Serialize + serde::de::DeserializeOwned>(msg: &T) -> T {
    serde_json::from_slice(&serde_json::to_vec(msg).unwrap()).unwrap()
}

/// The local side (core, outbox, reconnection), one session's queue, and
/// what the global side has read.
struct Pair {
    now: f64,
    core: Core,
    outbox: Outbox<(ToGlobal, Bytes)>,
    reconnect: Reconnect,
    /// The current session's queue (`None`: no session), and its capacity.
    session: Option<VecDeque<(ToGlobal, Bytes)>>,
    capacity: usize,
    /// Whether the current session got as far as `Registered`.
    registered: bool,
    /// Every message the global RM read, decoded, in order.
    read: Vec<ToGlobal>,
    /// Sessions started so far.
    sessions: usize,
}

impl Pair {
    fn new(slots: u32, capacity: usize, stall: Duration) -> Pair {
        let mut pair = Pair {
            now: 0.0,
            core: Core::new(slots),
            outbox: Outbox::new(stall),
            reconnect: Reconnect::default(),
            session: None,
            capacity,
            registered: false,
            read: Vec::new(),
            sessions: 0,
        };
        pair.connect();
        pair
    }

    /// A session is up: the core advertises on it.
    fn connect(&mut self) {
        self.reconnect.on_connected();
        self.session = Some(VecDeque::new());
        self.sessions += 1;
        self.registered = false;
        self.outbox.on_up();
        self.core.on_global_connected("[ Name = \"m\" ]".into());
        self.pump();
    }

    /// Carries out the core's effects as the daemon does: messages through
    /// the outbox into the session's queue, launches succeed at once.
    fn pump(&mut self) {
        self.core.sanity_check();
        loop {
            let effects = self.core.take_effects();
            if effects.is_empty() {
                return;
            }
            for e in effects {
                match e {
                    Effect::ToGlobal(msg, payload) => self.send((msg, payload)),
                    Effect::Launch(l) => self.core.on_launched(l.process, Ok(())),
                    Effect::Heartbeat => self.core.on_heartbeat(String::new()),
                    other => panic!("not expected here: {other:?}"),
                }
            }
        }
    }

    fn send(&mut self, m: (ToGlobal, Bytes)) {
        match self.outbox.send(m) {
            Route::Queue(m) => {
                let queue = self
                    .session
                    .as_mut()
                    .expect("the outbox is up with a session");
                if queue.len() < self.capacity {
                    queue.push_back(m);
                } else {
                    self.outbox.on_full(m, self.now);
                }
            }
            Route::Kept => {}
            Route::NoLink(m) => panic!("sent with no session: {m:?}"),
        }
    }

    /// The global RM reads `n` messages off the session; each makes room
    /// for one that waits.
    fn global_reads(&mut self, n: usize) {
        for _ in 0..n {
            let Some((msg, _)) = self.session.as_mut().and_then(VecDeque::pop_front) else {
                return;
            };
            self.read.push(wire(&msg));
            if self.outbox.wants_room()
                && let Some(m) = self.outbox.on_room(self.now)
            {
                self.session.as_mut().expect("up").push_back(m);
            }
        }
    }

    /// The global RM sends `msg`.
    fn global_says(&mut self, msg: FromGlobal) {
        if matches!(msg, FromGlobal::Registered { .. }) {
            self.registered = true;
        }
        self.core.on_time(self.now);
        self.core.on_global(wire(&msg), Bytes::new());
        self.pump();
    }

    /// The session ended: what it had not written goes back to the core,
    /// and the reconnection is scheduled (jitter in the middle).
    fn lose(&mut self) {
        let unwritten = self.session.take().expect("a session").into();
        let unsent = self.outbox.on_down(unwritten);
        self.core.on_global_lost(unsent);
        self.reconnect.on_lost(self.now, self.registered, 0.5);
        self.pump();
    }

    /// Moves the clock to `to`, through every deadline of the core, the
    /// outbox and the reconnection on the way, carrying out their outputs.
    fn advance(&mut self, to: f64) {
        loop {
            let next = [
                self.core.next_deadline(),
                self.outbox.next_deadline(),
                self.reconnect.next_deadline(),
            ]
            .into_iter()
            .flatten()
            .filter(|&t| t <= to)
            .min_by(f64::total_cmp);
            let Some(t) = next else {
                break;
            };
            self.now = self.now.max(t);
            self.core.on_time(self.now);
            self.pump();
            if self.outbox.on_time(self.now) == Some(LinkOutput::Kick) {
                self.lose();
            }
            if self.reconnect.on_time(self.now) == Some(LinkOutput::Reconnect) {
                self.connect();
            }
        }
        self.now = to;
    }

    /// What the global RM read, other than heartbeats, from index `from`.
    fn read_since(&self, from: usize) -> Vec<ToGlobal> {
        self.read[from..]
            .iter()
            .filter(|m| !matches!(m, ToGlobal::Heartbeat { .. }))
            .cloned()
            .collect()
    }
}

fn registered(slots: u64) -> FromGlobal {
    FromGlobal::Registered {
        hosts: (1..=slots).map(HostId).collect(),
        heartbeat_ms: 10_000,
    }
}

/// A spawn of `process` (of job 1, a one-byte executable `w`) on `host`;
/// the policy's tests use it too.
pub(crate) fn spawn(process: u64, host: u64) -> FromGlobal {
    FromGlobal::Spawn {
        process: ProcessId(process),
        job: JobId(1),
        host: HostId(host),
        executable: ExecutableRef {
            name: "w".into(),
            sha256: "a".repeat(64),
            size: 1,
        },
        args: vec![],
        output: Default::default(),
        requests: Default::default(),
    }
}

fn started(process: u64) -> ToGlobal {
    ToGlobal::Started {
        process: ProcessId(process),
        result: Ok(()),
    }
}

#[test]
fn a_global_rm_that_stops_reading_is_dropped_and_hears_everything_after_the_reconnection() {
    let mut p = Pair::new(4, 2, Duration::from_secs(30));
    p.global_reads(1);
    assert!(matches!(p.read[0], ToGlobal::Advertise { .. }));
    p.global_says(registered(4));
    // Four processes start; the global RM reads none of their starts: two
    // fill the session's queue, two wait in the outbox.
    for i in 1..=4 {
        p.global_says(spawn(i, i));
    }
    assert_eq!(p.outbox.waiting(), 2);
    assert_eq!(p.outbox.next_deadline(), Some(30.0));
    p.advance(29.9);
    assert_eq!(p.sessions, 1, "not dropped before the stall time");
    // No progress for the stall time: kicked, and reconnected after the
    // first backoff step (the session had registered).
    p.advance(31.0);
    assert_eq!(p.sessions, 2);
    let from = p.read.len();
    p.global_reads(1);
    let ToGlobal::Advertise { running, .. } = &p.read[from] else {
        panic!("{:?}", p.read[from]);
    };
    assert_eq!(running, &(1..=4).map(ProcessId).collect::<Vec<_>>());
    p.global_says(registered(4));
    p.global_reads(100);
    assert_eq!(
        p.read_since(from + 1),
        (1..=4).map(started).collect::<Vec<_>>(),
        "every start, once, in order, after the new registration"
    );
    assert_eq!(p.outbox.waiting(), 0);
    assert_eq!(p.outbox.next_deadline(), None);
}

#[test]
fn a_slow_global_rm_that_keeps_reading_is_never_dropped() {
    let mut p = Pair::new(4, 1, Duration::from_secs(30));
    p.global_reads(1);
    p.global_says(registered(4));
    for i in 1..=4 {
        p.global_says(spawn(i, i));
    }
    // One message every 20 s, fewer than the machine sends (heartbeats
    // every 10 s): slow, but progress within the stall time each time.
    for k in 1..=10 {
        p.advance(20.0 * f64::from(k));
        p.global_reads(1);
    }
    assert!(p.outbox.waiting() > 0, "messages still wait for room");
    p.global_reads(1000);
    assert_eq!(p.sessions, 1);
    assert_eq!(p.read_since(1), (1..=4).map(started).collect::<Vec<_>>());
    assert_eq!(p.outbox.next_deadline(), None);
}
