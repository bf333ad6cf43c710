//! The CARMI side of the simulation: the global RM's real core
//! ([`Router`], with its allocator), and per machine the local RM's real core
//! ([`Core`]) and owner policy ([`Policy`]) fed by a simulated owner, plus one
//! submit machine without slots on which the WoDi server is an application.
//!
//! Nothing here decides anything: every message between the cores is
//! encoded as a frame (`carmi_proto::wire`, serde) when sent and decoded when
//! it arrives, `latency` later, in the manner of quinn-proto's test `Pair`.
//! Each machine is driven as `carmi-local`'s daemon drives its core: the
//! time given by [`Core::on_time`] before every input and at
//! [`Core::next_deadline`] (one timer per machine, `Ev::Machine`), which
//! brings heartbeats ([`Effect::Heartbeat`]) and the owner policy's steps
//! ([`Core::policy_due`], then [`Core::step_policy`]); only launches and
//! signals are simulated.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use carmi_global_core::node::{Effect as GlobalEffect, GlobalCore, Input};
use carmi_global_core::router::{LinkId, Output, Router, RouterConfig};
use carmi_global_core::staging::Staging;
use carmi_local_core::node::{Core, Effect};
use carmi_local_core::owner::SimulatedOwner;
use carmi_local_core::policy::{Policy, PolicyConfig};
use carmi_proto::ids::{ConnId, HostId, ProcessId, RequestId};
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, FromGlobal, FromLocal, OwnerEvent, Request, Role, ToGlobal, ToLocal,
};
use carmi_proto::wire::{decode, encode_header};
use classad::ClassAd;

use crate::queue::{Ev, Queue, time};

/// Largest frame the simulated links carry (as the daemons' default).
const MAX_FRAME: usize = 1 << 26;

/// The WoDi server's one connection to its local RM.
const APP_CONN: ConnId = ConnId(1);

/// The worker executable: the global RM holds it from the start (uploaded
/// before the run), so no staging is simulated.
pub(crate) fn worker_exe() -> ExecutableRef {
    ExecutableRef {
        name: "wodi-worker".into(),
        sha256: "5e".repeat(32),
        size: 1,
    }
}

/// What the CARMI side hands to the WoDi side.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ToWodi {
    /// A message on the server's connection to its local RM.
    App(FromLocal),
    /// A worker process was started on a host (its worker id from its
    /// WoDi connection argument).
    Launched {
        process: ProcessId,
        worker: u64,
        host: HostId,
    },
    /// The process was stopped (SIGSTOP).
    Suspended(ProcessId),
    /// The process was continued (SIGCONT).
    Resumed(ProcessId),
    /// The process was signalled to end (SIGTERM or SIGKILL): it exits.
    Ended(ProcessId),
}

/// The pool's settings.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The local RMs' owner policy (carmi-local's default: HTCondor's
    /// desktop policy, 15, 5 and 10 minutes).
    pub policy: PolicyConfig,
    /// One-way delay of every message between two cores, seconds.
    pub latency: f64,
    /// Heartbeat period the global RM asks of local RMs, seconds.
    pub heartbeat: f64,
    /// From a worker process started to it connected and ready for work.
    pub worker_startup: f64,
    /// What a host's first worker pays on top of `worker_startup`: its
    /// machine fetches the executable from the global RM into its cache
    /// (later workers there start from the cache).
    pub executable_fetch: f64,
    /// Check the CARMI cores' invariants (`sanity_check`) after every
    /// input they take: slow, for tests that want the real cores checked
    /// under churn.
    pub check: bool,
}

/// Seconds from `class_spawn` to the worker's first message with the
/// executable in the machine's cache: the p50s of spawn (0.631 s) and first
/// message (0.019 s) of `carmi-bench grant-latency 50 4`, 2026-11-26, on
/// the real daemons: 4 one-slot local RMs on one 2-core host, a 41 MiB
/// worker. Taken from a debug build at load average 25-35 (the release
/// build did not finish in the session): an upper bound of what this host
/// costs; docs/results.md, "Grant latency". The match (`addhosts` to
/// `HostsAdded`, 0.139 s there) is simulated by the real cores here.
pub const MEASURED_WORKER_STARTUP: f64 = 0.65;

/// Seconds a machine's first fetch of a new executable adds to a spawn: the
/// p50 of the same run's "executable fetch" (spawn of a new 41 MiB
/// executable minus spawn of the cached one: upload, hashing, fetch into the
/// machine's cache).
pub const MEASURED_EXECUTABLE_FETCH: f64 = 8.56;

impl Default for PoolConfig {
    /// CARMI's default owner policy, 1 ms links, 30 s heartbeats (the
    /// default is 1 s; no machine is ever silent here, so it only costs
    /// events) and a worker that starts as fast as the real daemons start
    /// one ([`MEASURED_WORKER_STARTUP`], [`MEASURED_EXECUTABLE_FETCH`]).
    fn default() -> PoolConfig {
        PoolConfig {
            policy: PolicyConfig::default(),
            latency: 0.001,
            heartbeat: 30.0,
            worker_startup: MEASURED_WORKER_STARTUP,
            executable_fetch: MEASURED_EXECUTABLE_FETCH,
            check: false,
        }
    }
}

/// One simulated machine: its local RM's core, policy and owner.
struct Machine {
    core: Core,
    policy: Policy,
    owner: SimulatedOwner,
    /// The machine ad the policy evaluates against.
    base: ClassAd,
    /// The same, as advertised.
    ad: String,
    name: String,
    link: LinkId,
    /// The core's deadline as last armed and the number of that arming
    /// (an event of an earlier arming is stale).
    armed: (Option<f64>, u64),
}

/// The CARMI side: the global RM, the pool's machines (index 1..) and the
/// submit machine (index 0).
pub(crate) struct Pool {
    cfg: PoolConfig,
    /// The global RM's core, driven through the calls its daemon makes.
    global: GlobalCore,
    machines: Vec<Machine>,
    links: BTreeMap<LinkId, usize>,
    /// Host ids of each pool host (machine `m`, one slot: host index `m - 1`).
    host_index: BTreeMap<HostId, usize>,
    /// Live processes and the machine each runs on.
    procs: BTreeMap<ProcessId, usize>,
    router_armed: Option<std::time::Duration>,
}

/// A frame as it would go on the wire.
fn frame<T: serde::Serialize>(msg: &T) -> Bytes {
    Bytes::from(encode_header(msg, 0))
}

/// Decodes a frame the simulation encoded; a frame that does not decode is
/// a bug of the protocol's serde forms, which is what the round trip is
/// there to find.
fn unframe<T: serde::de::DeserializeOwned + std::fmt::Debug>(bytes: &Bytes) -> T {
    let mut buf = BytesMut::from(&bytes[..]);
    match decode(&mut buf, MAX_FRAME) {
        Ok(Some((msg, _))) => msg,
        other => panic!("a simulated frame did not survive its round trip: {other:?}"),
    }
}

/// The ad of pool host `i`: its speed as `Speed` and as `Mips` (the
/// allocator grants the fastest idle hosts first).
fn machine_ad(i: usize, speed: f64) -> String {
    format!(
        "[ Name = \"h{i}\"; Machine = \"h{i}\"; Mips = {}; Speed = {speed}; Arch = \"X86_64\"; OpSys = \"LINUX\" ]",
        (speed * 1000.0).round().max(1.0) as i64
    )
}

impl Pool {
    /// A pool of one-slot machines with these advertised speeds, none
    /// connected yet (give the owners their state first, then [`Pool::start`]).
    pub fn new(cfg: PoolConfig, speeds: &[f64]) -> Pool {
        let router = Router::new(RouterConfig {
            heartbeat: time(cfg.heartbeat),
            started_unix: 0,
            ..RouterConfig::default()
        });
        let global = GlobalCore::new(router, Staging::default());
        let mut pool = Pool {
            cfg,
            global,
            machines: Vec::new(),
            links: BTreeMap::new(),
            host_index: BTreeMap::new(),
            procs: BTreeMap::new(),
            router_armed: None,
        };
        pool.global
            .on_input(Input::Stored(worker_exe()), std::time::Duration::ZERO);
        let submit = "[ Name = \"submit\"; Machine = \"submit\"; Mips = 1; Arch = \"X86_64\" ]";
        let ads = std::iter::once((String::from("submit"), submit.to_string(), 0)).chain(
            speeds
                .iter()
                .enumerate()
                .map(|(i, &s)| (format!("h{i}"), machine_ad(i, s), 1)),
        );
        for (m, (name, ad, slots)) in ads.enumerate() {
            let link = LinkId(m as u64 + 1);
            let base = ClassAd::parse(&ad).expect("the simulated machine ads parse");
            pool.machines.push(Machine {
                core: Core::new(slots),
                policy: Policy::new(pool.cfg.policy.clone(), 0.0),
                owner: SimulatedOwner::new(0.0),
                base,
                ad,
                name,
                link,
                armed: (None, 0),
            });
            pool.links.insert(link, m);
        }
        pool
    }

    /// Starts every machine's local RM as the daemon starts: its owner
    /// policy evaluated first (a machine whose owner is there offers
    /// nothing), then connected to the global RM; the submit machine's
    /// local RM announces the WoDi server's connection.
    pub fn start(&mut self, q: &mut Queue) {
        for m in 0..self.machines.len() {
            if m > 0 {
                self.machines[m].core.on_time(q.now);
                self.evaluate(m, q, &mut Vec::new());
            }
            let (link, name, ad) = {
                let mach = &self.machines[m];
                (mach.link, mach.name.clone(), mach.ad.clone())
            };
            let opened = Input::Opened {
                link,
                role: Role::Local { name },
                identity: None,
            };
            self.global.on_input(opened, time(q.now));
            self.machines[m].core.on_time(q.now);
            self.machines[m].core.on_global_connected(ad);
            self.router_outputs(q);
            self.core_effects(m, q, &mut Vec::new());
        }
        self.machines[0].core.on_time(q.now);
        self.machines[0]
            .core
            .on_app_connected(APP_CONN, None, None, "sim:0".into());
        self.core_effects(0, q, &mut Vec::new());
    }

    /// The pool host index (as in the configuration's speeds) of a host id.
    pub fn host_index(&self, host: HostId) -> Option<usize> {
        self.host_index.get(&host).copied()
    }

    /// Sends a request on the WoDi server's connection.
    pub fn app_request(&mut self, id: RequestId, body: Request, q: &mut Queue) {
        let at = q.now + self.cfg.latency;
        q.push(
            at,
            Ev::FromApp {
                frame: frame(&ToLocal::Request { id, body }),
            },
        );
    }

    /// A worker process ended (after [`ToWodi::Ended`]): its machine reports it.
    pub fn process_exited(&mut self, process: ProcessId, q: &mut Queue) {
        if let Some(&m) = self.procs.get(&process) {
            q.push(q.now, Ev::Exited { m, process });
        }
    }

    /// Takes an owner event of pool host `i` at `at`; before the run starts
    /// (`at < 0`) it only sets the owner's state.
    pub fn owner_event(&mut self, i: usize, event: OwnerEvent, at: f64, q: &mut Queue) {
        if at < 0.0 {
            self.machines[i + 1].owner.apply(event, at);
        } else {
            q.push(at, Ev::Owner { m: i + 1, event });
        }
    }

    /// Carries out one CARMI event; what reaches the WoDi side is in `out`.
    /// Returns false if the event is not the CARMI side's.
    pub fn handle(&mut self, ev: &Ev, q: &mut Queue, out: &mut Vec<ToWodi>) -> bool {
        let now = q.now;
        match ev {
            Ev::ToRouter { link, frame } => {
                let msg: ToGlobal = unframe(frame);
                self.global.on_message(*link, msg, time(now));
                self.router_outputs(q);
            }
            Ev::RouterTick(d) => {
                self.router_armed = None;
                self.global.on_tick((*d).max(time(now)));
                self.router_outputs(q);
            }
            Ev::ToLocal { m, frame } => {
                let msg: FromGlobal = unframe(frame);
                if let FromGlobal::Registered { hosts, .. } = &msg
                    && *m > 0
                {
                    for h in hosts {
                        self.host_index.insert(*h, m - 1);
                    }
                }
                self.machines[*m].core.on_time(now);
                self.machines[*m].core.on_global(msg, Bytes::new());
                self.core_effects(*m, q, out);
            }
            Ev::FromApp { frame } => {
                if let ToLocal::Request { id, body } = unframe(frame) {
                    self.machines[0].core.on_time(now);
                    self.machines[0].core.on_app_request(APP_CONN, id, body);
                    self.core_effects(0, q, out);
                }
            }
            Ev::ToApp { frame } => out.push(ToWodi::App(unframe(frame))),
            Ev::Machine { m, timer } => {
                if self.machines[*m].armed.1 == *timer {
                    self.machines[*m].armed.0 = None;
                    self.machines[*m].core.on_time(now);
                    self.core_effects(*m, q, out);
                }
            }
            Ev::Owner { m, event } => {
                self.machines[*m].core.on_time(now);
                self.machines[*m].owner.apply(*event, now);
                self.evaluate(*m, q, out);
            }
            Ev::Exited { m, process } => {
                if self.procs.remove(process).is_some() {
                    let status = ExitStatus::Signal(15);
                    self.machines[*m].core.on_time(now);
                    self.machines[*m].core.on_exited(*process, status, 0.0);
                    self.core_effects(*m, q, out);
                }
            }
            _ => return false,
        }
        if self.cfg.check {
            self.global.router().sanity_check();
            for m in &self.machines {
                m.core.sanity_check();
            }
        }
        true
    }

    /// Sends the router's outputs and re-arms its timer.
    fn router_outputs(&mut self, q: &mut Queue) {
        let at = q.now + self.cfg.latency;
        // No journal (records dropped), no job key: the simulated local
        // RMs do not check credentials, so none is sent before a spawn.
        for effect in self.global.take_batch().effects {
            match effect {
                GlobalEffect::Router(Output::Send { link, msg }) => {
                    if let Some(&m) = self.links.get(&link) {
                        q.push(
                            at,
                            Ev::ToLocal {
                                m,
                                frame: frame(&msg),
                            },
                        );
                    }
                }
                GlobalEffect::Router(Output::Close { link, reason }) => {
                    tracing::warn!(%link, %reason, "the global RM closed a simulated link");
                }
                // No returned files, store or batch system; simulated links
                // always read, so none is kicked.
                GlobalEffect::Router(_)
                | GlobalEffect::Credential { .. }
                | GlobalEffect::Kick { .. } => {}
            }
        }
        if let Some(d) = self.global.next_deadline()
            && self.router_armed.is_none_or(|a| d < a)
        {
            self.router_armed = Some(d);
            q.push(d.as_secs_f64(), Ev::RouterTick(d));
        }
    }

    /// Carries out machine `m`'s core effects, as the local RM's daemon does.
    fn core_effects(&mut self, m: usize, q: &mut Queue, out: &mut Vec<ToWodi>) {
        let at = q.now + self.cfg.latency;
        loop {
            let effects = self.machines[m].core.take_effects();
            if effects.is_empty() {
                break;
            }
            for e in effects {
                match e {
                    Effect::ToGlobal(msg, _) => {
                        let link = self.machines[m].link;
                        q.push(
                            at,
                            Ev::ToRouter {
                                link,
                                frame: frame(&msg),
                            },
                        );
                    }
                    Effect::ToApp(_, msg) => q.push(at, Ev::ToApp { frame: frame(&msg) }),
                    Effect::Launch(l) => {
                        // Every executable is in the cache: the process starts now.
                        let worker = l
                            .args
                            .iter()
                            .find_map(|a| a.strip_prefix(wodi_core::proto::CONNECT_ARG))
                            .and_then(wodi_core::proto::parse_connect_arg)
                            .map(|(_, _, w)| w.0);
                        self.procs.insert(l.process, m);
                        self.machines[m].core.on_launched(l.process, Ok(()));
                        if let Some(worker) = worker {
                            out.push(ToWodi::Launched {
                                process: l.process,
                                worker,
                                host: l.host,
                            });
                        }
                    }
                    Effect::Suspend(p) => out.push(ToWodi::Suspended(p)),
                    Effect::Resume(p) => out.push(ToWodi::Resumed(p)),
                    // A worker ends on SIGTERM at once, so the grace never runs out.
                    Effect::Kill(p) | Effect::Terminate(p) | Effect::KillNow(p) => {
                        if self.procs.contains_key(&p) {
                            out.push(ToWodi::Ended(p));
                        }
                    }
                    // No dynamic attributes are simulated: the update is empty.
                    Effect::Heartbeat => self.machines[m].core.on_heartbeat(String::new()),
                    // The master's job ending ends the simulation anyway.
                    Effect::CloseApp(_) => {}
                    // Simulated machines have no orphan limit.
                    Effect::Store { .. }
                    | Effect::FetchFrom { .. }
                    | Effect::ReadLog { .. }
                    | Effect::Orphaned { .. } => {
                        tracing::warn!(?e, "an effect the simulated pool does not carry out");
                    }
                }
            }
        }
        // The submit machine has no slots and no owner: no policy to step.
        if m > 0 && self.machines[m].core.policy_due().is_some() {
            return self.evaluate(m, q, out);
        }
        self.arm(m, q);
    }

    /// Steps machine `m`'s owner policy after a look at its simulated
    /// owner, as `carmi-local`'s daemon does with one (the core applies
    /// what the policy decides), and carries out the effects.
    fn evaluate(&mut self, m: usize, q: &mut Queue, out: &mut Vec<ToWodi>) {
        let now = q.now;
        let mach = &mut self.machines[m];
        mach.policy.observe(mach.owner.observation(now));
        mach.core.step_policy(&mut mach.policy, now, &mach.base);
        self.core_effects(m, q, out);
    }

    /// Arms machine `m`'s one timer at its core's next deadline, unless it
    /// is armed there already.
    fn arm(&mut self, m: usize, q: &mut Queue) {
        let mach = &mut self.machines[m];
        let next = mach.core.next_deadline();
        if next == mach.armed.0 {
            return;
        }
        mach.armed = (next, mach.armed.1 + 1);
        if let Some(at) = next {
            let timer = mach.armed.1;
            q.push(at, Ev::Machine { m, timer });
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
