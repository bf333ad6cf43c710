//! The WoDi side of the simulation: the WoDi server's core
//! ([`wodi_core::run::Run`], every decision the server makes, with the scheduler
//! inside) driven as the server drives it: the master's and the workers'
//! messages and CARMI's events in (each round-tripped through serde), its
//! CARMI requests made on the server's application connection, its messages
//! carried to the simulated master and workers. The workers compute their
//! steps at their host's speed; the master runs cycles of steps.
//!
//! This is the one adapter between the WoDi core and the simulated pool.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use carmi_proto::ids::{HostId, ProcessId, RequestId};
use carmi_proto::msg::{FromLocal, Request};
use rand::rngs::StdRng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use wodi_core::ids::{CycleId, StepId, WorkerId};
use wodi_core::order::Ordering;
use wodi_core::plan::SavedEstimate;
use wodi_core::plan::lower_bound;
use wodi_core::profile::sample_cycle;
use wodi_core::proto::{ClassSpec, FromMaster, FromWorker, ToMaster, ToWorker};
use wodi_core::run::{CarmiCall, CarmiRequests, MasterId, Output, Run, RunConfig};
use wodi_core::speed::SpeedSource;
use wodi_core::stats::Stats;

use crate::config::SimConfig;
use crate::pool::{Pool, ToWodi, worker_exe};
use crate::queue::{Ev, Queue, time};

/// The one resource class of a simulated run.
const CLASS: &str = "hosts";

/// A message as it crosses a connection: serialized and read back.
fn wire<T: Serialize + DeserializeOwned>(msg: &T) -> T {
    let json = serde_json::to_vec(msg).expect("protocol messages serialize");
    serde_json::from_slice(&json).expect("a serialized message reads back")
}

/// A worker process computing its queue of steps one at a time.
struct SimWorker {
    process: ProcessId,
    /// Pool host index (for its real speed).
    host: usize,
    /// Connected to the server.
    ready: bool,
    /// Tickets and their work (speed-1 seconds, the step's payload).
    queue: VecDeque<(u64, f64)>,
    /// The step being computed: speed-1 work left at `since` (when running).
    current: Option<Current>,
    /// Bumped whenever the current computation stops or restarts.
    epoch: u64,
}

struct Current {
    ticket: u64,
    left: f64,
    since: Option<f64>,
    started: f64,
    cpu: f64,
}

/// The master's progress through its cycles.
struct Master {
    id: Option<MasterId>,
    cycle: u32,
    cycle_start: f64,
    /// Steps of the current cycle without a result yet.
    open: usize,
    /// This cycle's step times (speed-1 seconds), by step id.
    times: Vec<f64>,
    cycle_s: Vec<f64>,
    bounds: Vec<f64>,
    /// The statistics the server answered `Complete` with.
    stats: Option<Stats>,
    /// The run cannot go on (the server said why).
    fatal: Option<String>,
}

/// The WoDi server, its workers and its master.
pub(crate) struct Wodi<'a> {
    cfg: &'a SimConfig,
    ordering: Ordering,
    rng: StdRng,
    run: Run,
    master: Master,
    workers: BTreeMap<WorkerId, SimWorker>,
    proc_worker: BTreeMap<ProcessId, WorkerId>,
    /// Processes stopped by their local RM.
    stopped: BTreeSet<ProcessId>,
    /// Whether each host has had a worker (for `startup_offsets`).
    had_worker: Vec<bool>,
    /// When the first worker was ready.
    pub first_ready: Option<f64>,
    next_request: u64,
    /// The run's deadline, as armed.
    armed: Option<std::time::Duration>,
}

impl<'a> Wodi<'a> {
    /// A server that has not reached CARMI yet.
    pub fn new(cfg: &'a SimConfig, ordering: Ordering, mut rng: StdRng) -> Wodi<'a> {
        let times = sample_cycle(&cfg.profile, &mut rng);
        let mut run_cfg = RunConfig::new("sim", "sim:0");
        // Nobody reads the progress reports: one an hour is plenty.
        run_cfg.status_every = time(3600.0);
        // No master timeout: the master connects once CARMI has attached it.
        run_cfg.master_timeout = time(crate::config::MAX_VIRTUAL_TIME);
        Wodi {
            cfg,
            ordering,
            run: Run::new(run_cfg, time(0.0)),
            master: Master {
                id: None,
                cycle: 0,
                cycle_start: 0.0,
                open: cfg.profile.len(),
                bounds: vec![lower_bound(&times, &cfg.speeds)],
                times,
                cycle_s: Vec::new(),
                stats: None,
                fatal: None,
            },
            rng,
            workers: BTreeMap::new(),
            proc_worker: BTreeMap::new(),
            stopped: BTreeSet::new(),
            had_worker: vec![false; cfg.speeds.len()],
            first_ready: None,
            next_request: 0,
            armed: None,
        }
    }

    /// True once the server answered the master's `Complete` (or gave up).
    pub fn done(&self) -> bool {
        self.master.stats.is_some() || self.master.fatal.is_some()
    }

    /// The server's statistics (empty if it gave up), with why it gave up.
    pub fn stats(&self) -> (Option<&Stats>, Option<&str>) {
        (self.master.stats.as_ref(), self.master.fatal.as_deref())
    }

    /// Cycle lengths and each cycle's lower bound, seconds.
    pub fn cycles(&self) -> (&[f64], &[f64]) {
        (&self.master.cycle_s, &self.master.bounds)
    }

    fn request(&mut self, body: Request, pool: &mut Pool, q: &mut Queue) -> RequestId {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        pool.app_request(id, body, q);
        id
    }

    /// Carries out a WoDi-side event (a worker or the run's timer); false
    /// if the event is not the WoDi side's.
    pub fn handle(&mut self, ev: &Ev, pool: &mut Pool, q: &mut Queue) -> bool {
        let now = q.now;
        match *ev {
            Ev::WorkerReady { worker } => {
                if !self.workers.contains_key(&worker) {
                    return true;
                }
                if self.run.worker_connected(worker, time(now)) {
                    self.first_ready.get_or_insert(now);
                    if let Some(w) = self.workers.get_mut(&worker) {
                        w.ready = true;
                    }
                } else {
                    self.workers.remove(&worker);
                }
            }
            Ev::StepDone { worker, epoch } => self.step_done(worker, epoch, q),
            Ev::Deadline(d) => {
                self.armed = None;
                self.run.tick(d.max(time(now)));
            }
            _ => return false,
        }
        self.flush(pool, q);
        true
    }

    /// Something from the CARMI side.
    pub fn on_carmi(&mut self, msg: ToWodi, pool: &mut Pool, q: &mut Queue) {
        let now = q.now;
        match msg {
            ToWodi::App(FromLocal::Attached { .. }) => self.start(now),
            // The simulated pool has no connections to prove anything on.
            ToWodi::App(FromLocal::Credential { .. }) => {}
            // The simulated pool ends no job under its master, and has no
            // tokens to refuse one with.
            ToWodi::App(FromLocal::JobEnded { .. } | FromLocal::Refused { .. }) => {}
            ToWodi::App(FromLocal::Event(e)) => self.run.carmi_event(e, time(now)),
            ToWodi::Launched {
                process,
                worker,
                host,
            } => self.launched(process, WorkerId(worker), host, pool, q),
            ToWodi::Suspended(p) => {
                self.stopped.insert(p);
                if let Some(&w) = self.proc_worker.get(&p) {
                    self.pause(w, now);
                }
            }
            ToWodi::Resumed(p) => {
                self.stopped.remove(&p);
                if let Some(&w) = self.proc_worker.get(&p) {
                    self.resume(w, q);
                }
            }
            ToWodi::Ended(p) => {
                self.stopped.remove(&p);
                pool.process_exited(p, q);
                if let Some(w) = self.proc_worker.remove(&p)
                    && let Some(sw) = self.workers.remove(&w)
                    && sw.ready
                {
                    // Its connection dropped; the run's loss grace decides.
                    self.run.worker_dropped(w, time(now));
                }
            }
        }
        self.flush(pool, q);
    }

    /// A worker process started: it connects `worker_startup` later (its
    /// host's first worker also pays the executable's fetch and the host's
    /// recorded offset).
    fn launched(
        &mut self,
        process: ProcessId,
        worker: WorkerId,
        host: HostId,
        pool: &Pool,
        q: &mut Queue,
    ) {
        let Some(h) = pool.host_index(host) else {
            return;
        };
        self.workers.insert(
            worker,
            SimWorker {
                process,
                host: h,
                ready: false,
                queue: VecDeque::new(),
                current: None,
                epoch: 0,
            },
        );
        self.proc_worker.insert(process, worker);
        let offset = if std::mem::replace(&mut self.had_worker[h], true) {
            0.0
        } else {
            self.cfg.pool.executable_fetch + self.cfg.startup_offsets.get(h).copied().unwrap_or(0.0)
        };
        let at = q.now + self.cfg.pool.worker_startup + offset;
        q.push(at, Ev::WorkerReady { worker });
    }

    /// Attached to CARMI: the master connects, starts the run and submits
    /// its first cycle.
    fn start(&mut self, now: f64) {
        if self.master.id.is_some() {
            return;
        }
        let m = self.run.master_connected(time(now));
        self.master.id = Some(m);
        let s = &self.cfg.sched;
        let init = FromMaster::Init {
            classes: vec![ClassSpec::new(CLASS, "Mips > 0", self.cfg.hosts_wanted)],
            executable: "wodi-worker".into(),
            args: Vec::new(),
            prefetch: s.prefetch,
            prefetch_max: s.prefetch_max,
            max_attempts: s.max_attempts,
            suspend_timeout_ms: s.suspend_timeout.as_millis() as u64,
            ordering: self.ordering,
            // As the server reads it from the machine ad, reference 1.
            speed: SpeedSource::MachineAd {
                attribute: "Speed".into(),
                reference: Some(1.0),
            },
            refine_speed: false,
            learn_from_wall: s.learn_from_wall,
            policies: self.cfg.policies(),
        };
        self.master_says(init, Bytes::new(), now);
        if self.cfg.grants.warm_history {
            self.restore_history(now);
        }
        self.submit_cycle(now);
    }

    /// The master restores the history an earlier run of the application
    /// left: the profile's means (what that history converges to).
    fn restore_history(&mut self, now: f64) {
        let saved: Vec<SavedEstimate> = self
            .cfg
            .profile
            .iter()
            .enumerate()
            .map(|(i, p)| SavedEstimate {
                step: StepId(i as u64),
                mean: p.mean,
                samples: 1,
            })
            .collect();
        let json = serde_json::to_vec(&saved).expect("estimates serialize");
        self.master_says(FromMaster::RestoreHistory, Bytes::from(json), now);
    }

    /// A master message, across the connection.
    fn master_says(&mut self, msg: FromMaster, payload: Bytes, now: f64) {
        if let Some(m) = self.master.id {
            self.run.master_message(m, wire(&msg), payload, time(now));
        }
    }

    fn submit_cycle(&mut self, now: f64) {
        let cycle = CycleId(u64::from(self.master.cycle));
        self.master_says(FromMaster::BeginCycle { cycle }, Bytes::new(), now);
        for i in 0..self.cfg.profile.len() {
            // The step's data is its work: what the worker computes.
            let work = serde_json::to_vec(&self.master.times[i]).expect("a number serializes");
            let step = StepId(i as u64);
            self.master_says(FromMaster::Step { step }, Bytes::from(work), now);
        }
    }

    /// Carries out the run's outputs and re-arms its timer.
    pub fn flush(&mut self, pool: &mut Pool, q: &mut Queue) {
        // A tick after every batch of inputs (the run's contract), and the
        // master's and workers' answers are inputs too: until quiet.
        loop {
            self.run.tick(time(q.now));
            if !self.drain(pool, q) {
                break;
            }
        }
        if let Some(d) = self.run.next_deadline()
            && self.armed.is_none_or(|a| d < a)
        {
            self.armed = Some(d);
            q.push(d.as_secs_f64(), Ev::Deadline(d));
        }
    }

    /// Carries out the run's outputs; false if there were none.
    fn drain(&mut self, pool: &mut Pool, q: &mut Queue) -> bool {
        let mut any = false;
        while let Some(out) = self.run.poll_output() {
            any = true;
            match out {
                Output::Carmi { call, request } => {
                    if let Some(id) = self.carmi(wire(&request), pool, q) {
                        self.run.issued(call, id);
                    }
                }
                Output::ToWorker {
                    worker,
                    msg,
                    payload,
                } => self.worker_gets(worker, wire(&msg), &payload, q),
                Output::ToMaster { msg, payload, .. } => self.master_gets(wire(&msg), &payload, q),
            }
        }
        any
    }

    /// Makes a CARMI request on the server's connection; its id, if the run
    /// needs it.
    fn carmi(&mut self, call: CarmiCall, pool: &mut Pool, q: &mut Queue) -> Option<RequestId> {
        let body = match call.into_requests() {
            CarmiRequests::One(body) => body,
            CarmiRequests::Untracked(bodies) => {
                for body in *bodies {
                    self.request(body, pool, q);
                }
                return None;
            }
            // Every worker runs the one simulated executable.
            CarmiRequests::Spawn { args, target, .. } => Request::ClassSpawn {
                executable: worker_exe(),
                args,
                target,
                output: Default::default(),
            },
        };
        Some(self.request(body, pool, q))
    }

    /// A message of the server to a worker.
    fn worker_gets(&mut self, worker: WorkerId, msg: ToWorker, payload: &Bytes, q: &mut Queue) {
        if let ToWorker::Step { ticket, .. } = msg {
            let work: f64 = serde_json::from_slice(payload).unwrap_or(0.0);
            if let Some(w) = self.workers.get_mut(&worker) {
                w.queue.push_back((ticket, work));
            }
            self.start_next(worker, q);
        }
    }

    /// A message of the server to the master.
    fn master_gets(&mut self, msg: ToMaster, payload: &Bytes, q: &mut Queue) {
        let now = q.now;
        match msg {
            ToMaster::Result { .. } => self.delivered(now),
            ToMaster::Stats => {
                self.master.stats = Some(serde_json::from_slice(payload).unwrap_or_default());
            }
            ToMaster::Fatal { reason } => {
                tracing::warn!(%reason, "the simulated run failed");
                self.master.fatal = Some(reason);
            }
            ToMaster::StepFailed { step, reason } => {
                tracing::warn!(%step, %reason, "a simulated step failed");
                self.delivered(now);
            }
            ToMaster::Ready | ToMaster::Status(_) | ToMaster::History => {}
        }
    }

    /// A worker's step finished: its result goes to the server.
    fn step_done(&mut self, worker: WorkerId, epoch: u64, q: &mut Queue) {
        let now = q.now;
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        if w.epoch != epoch {
            return;
        }
        let Some(c) = w.current.take() else {
            return;
        };
        let cpu = c.cpu + c.since.map_or(0.0, |s| now - s);
        let msg = FromWorker::Result {
            ticket: c.ticket,
            cpu_us: (cpu * 1e6).round() as u64,
            wall_us: ((now - c.started) * 1e6).round() as u64,
        };
        self.run
            .worker_message(worker, wire(&msg), Bytes::new(), time(now));
        self.start_next(worker, q);
    }

    /// The master got one more result of its cycle.
    fn delivered(&mut self, now: f64) {
        let m = &mut self.master;
        m.open = m.open.saturating_sub(1);
        if m.open > 0 {
            return;
        }
        m.cycle_s
            .push(now - m.cycle_start.max(self.first_ready.unwrap_or(0.0)));
        let cycle = CycleId(u64::from(m.cycle));
        m.cycle += 1;
        self.master_says(FromMaster::EndCycle { cycle }, Bytes::new(), now);
        let m = &mut self.master;
        if m.cycle == self.cfg.cycles {
            self.master_says(FromMaster::Complete, Bytes::new(), now);
            return;
        }
        m.cycle_start = now;
        m.times = sample_cycle(&self.cfg.profile, &mut self.rng);
        m.bounds.push(lower_bound(&m.times, &self.cfg.speeds));
        m.open = self.cfg.profile.len();
        self.submit_cycle(now);
    }

    fn actual_speed(&self, host: usize) -> f64 {
        self.cfg
            .actual_speeds
            .as_ref()
            .and_then(|a| a.get(host).copied())
            .unwrap_or(self.cfg.speeds[host])
    }

    /// Starts the worker's next step if it is idle and may run.
    fn start_next(&mut self, worker: WorkerId, q: &mut Queue) {
        let now = q.now;
        let Some(w) = self.workers.get(&worker) else {
            return;
        };
        if !w.ready || w.current.is_some() || self.stopped.contains(&w.process) {
            return;
        }
        let speed = self.actual_speed(w.host);
        let w = self.workers.get_mut(&worker).expect("looked up above");
        let Some((ticket, work)) = w.queue.pop_front() else {
            return;
        };
        w.epoch += 1;
        w.current = Some(Current {
            ticket,
            left: work,
            since: Some(now),
            started: now,
            cpu: 0.0,
        });
        let epoch = w.epoch;
        q.push(now + work / speed, Ev::StepDone { worker, epoch });
    }

    /// Stops the worker's computation (SIGSTOP), keeping the work done.
    fn pause(&mut self, worker: WorkerId, now: f64) {
        let Some(host) = self.workers.get(&worker).map(|w| w.host) else {
            return;
        };
        let speed = self.actual_speed(host);
        if let Some(w) = self.workers.get_mut(&worker)
            && let Some(c) = &mut w.current
            && let Some(since) = c.since.take()
        {
            c.left -= (now - since) * speed;
            c.cpu += now - since;
            w.epoch += 1;
        }
    }

    /// Continues the worker (SIGCONT).
    fn resume(&mut self, worker: WorkerId, q: &mut Queue) {
        let now = q.now;
        let Some(host) = self.workers.get(&worker).map(|w| w.host) else {
            return;
        };
        let speed = self.actual_speed(host);
        let w = self.workers.get_mut(&worker).expect("looked up above");
        match &mut w.current {
            Some(c) if c.since.is_none() => {
                c.since = Some(now);
                w.epoch += 1;
                let at = now + c.left.max(0.0) / speed;
                let epoch = w.epoch;
                q.push(at, Ev::StepDone { worker, epoch });
            }
            Some(_) => {}
            None => self.start_next(worker, q),
        }
    }
}
