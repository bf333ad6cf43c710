//! The WoDi side of the simulation: the scheduler core ([`Sched`]) driven as
//! the WoDi server drives it (its outputs become CARMI requests on the
//! server's application connection, CARMI's events become its inputs, as in
//! `wodi/src/server/carmi.rs`), the simulated workers that compute steps at
//! their host's speed, and the master that runs cycles of steps.
//!
//! This is the one adapter between the WoDi core and the simulated pool:
//! when the server's remaining decisions move into a pure WoDi core, it is
//! this file that changes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, FailureCode, FromLocal, Request, SpawnTarget};
use rand::rngs::StdRng;
use wodi::ids::{CycleId, StepId, WorkerId};
use wodi::plan::{Hysteresis, lower_bound};
use wodi::profile::sample_cycle;
use wodi::sched::{Dispatch, LossCause, Output, Sched, Ticket, Verdict};

use crate::config::SimConfig;
use crate::pool::{Pool, ToWodi, WORKER_ARG, worker_exe};
use crate::queue::{Ev, Queue, time};

/// The one resource class of a simulated run.
const CLASS: &str = "hosts";

/// How long the server waits after a worker's connection dropped before it
/// counts the worker lost (the WoDi server's default `loss_grace`).
const LOSS_GRACE: f64 = 0.5;

/// A worker process computing its queue of tickets one at a time.
struct SimWorker {
    process: ProcessId,
    /// Pool host index (for its real speed).
    host: usize,
    ready: bool,
    queue: VecDeque<(Ticket, StepId)>,
    /// The step being computed: speed-1 work left at `since` (when running).
    current: Option<Current>,
    /// Bumped whenever the current computation stops or restarts.
    epoch: u64,
}

struct Current {
    ticket: Ticket,
    left: f64,
    since: Option<f64>,
    started: f64,
    cpu: f64,
}

/// The master's progress through its cycles.
struct Master {
    cycle: u32,
    cycle_start: f64,
    /// Steps of the current cycle without a result yet.
    open: usize,
    /// This cycle's step times (speed-1 seconds), by step id.
    times: Vec<f64>,
    cycle_s: Vec<f64>,
    bounds: Vec<f64>,
    hold: Hysteresis,
    started: bool,
    done: bool,
}

/// The WoDi server, its workers and its master.
pub(crate) struct Wodi<'a> {
    cfg: &'a SimConfig,
    rng: StdRng,
    pub sched: Sched,
    master: Master,
    next_request: u64,
    /// `AddHosts` requests and their class.
    host_requests: BTreeMap<RequestId, String>,
    /// Host requests withdrawn on purpose.
    cancelled: BTreeSet<RequestId>,
    /// `ClassSpawn` requests not answered yet, and their worker.
    spawns: BTreeMap<RequestId, WorkerId>,
    workers: BTreeMap<WorkerId, SimWorker>,
    proc_worker: BTreeMap<ProcessId, WorkerId>,
    /// Processes stopped by their local RM.
    stopped: BTreeSet<ProcessId>,
    /// Whether each host has had a worker (for `startup_offsets`).
    had_worker: Vec<bool>,
    /// When the first worker was ready.
    pub first_ready: Option<f64>,
    /// The scheduler's deadline, as armed.
    armed: Option<std::time::Duration>,
}

impl<'a> Wodi<'a> {
    /// A server that has not reached CARMI yet.
    pub fn new(cfg: &'a SimConfig, dispatch: Box<dyn Dispatch>, mut rng: StdRng) -> Wodi<'a> {
        let times = sample_cycle(&cfg.profile, &mut rng);
        Wodi {
            cfg,
            sched: Sched::new(cfg.sched.clone(), dispatch),
            master: Master {
                cycle: 0,
                cycle_start: 0.0,
                open: cfg.profile.len(),
                bounds: vec![lower_bound(&times, &cfg.speeds)],
                times,
                cycle_s: Vec::new(),
                hold: Hysteresis::new(cfg.hosts_wanted, cfg.hysteresis),
                started: false,
                done: false,
            },
            rng,
            next_request: 0,
            host_requests: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            spawns: BTreeMap::new(),
            workers: BTreeMap::new(),
            proc_worker: BTreeMap::new(),
            stopped: BTreeSet::new(),
            had_worker: vec![false; cfg.speeds.len()],
            first_ready: None,
            armed: None,
        }
    }

    /// True once the master's last cycle ended.
    pub fn done(&self) -> bool {
        self.master.done
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

    /// Carries out a WoDi-side event (a worker or the core's timer); false
    /// if the event is not the WoDi side's.
    pub fn handle(&mut self, ev: &Ev, pool: &mut Pool, q: &mut Queue) -> bool {
        let now = q.now;
        match *ev {
            Ev::WorkerReady { worker } => {
                let Some(w) = self.workers.get_mut(&worker) else {
                    return true;
                };
                w.ready = true;
                self.first_ready.get_or_insert(now);
                self.sched.worker_joined(worker, time(now));
                self.start_next(worker, q);
            }
            Ev::StepDone { worker, epoch } => self.step_done(worker, epoch, q),
            Ev::Deadline(d) => {
                self.armed = None;
                self.sched.on_deadline(d.max(time(now)));
            }
            Ev::LossDue { worker } => {
                // Unknown to the core once its host was lost: then a no-op.
                self.sched
                    .worker_lost(worker, LossCause::Crashed, time(now));
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
            ToWodi::App(FromLocal::Attached { .. }) => self.start(pool, q),
            ToWodi::App(FromLocal::Event(e)) => self.on_event(e, pool, q),
            ToWodi::Launched {
                process,
                worker,
                host,
            } => {
                let Some(h) = pool.host_index(host) else {
                    return;
                };
                let worker = WorkerId(worker);
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
                // Only a host's first worker pays its recorded offset.
                let offset = if std::mem::replace(&mut self.had_worker[h], true) {
                    0.0
                } else {
                    self.cfg.startup_offsets.get(h).copied().unwrap_or(0.0)
                };
                let at = now + self.cfg.pool.worker_startup + offset;
                q.push(at, Ev::WorkerReady { worker });
            }
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
                if let Some(w) = self.proc_worker.remove(&p) {
                    self.workers.remove(&w);
                    // Its connection dropped: the server waits `loss_grace`
                    // for the pool to say whether the host went with it.
                    self.sched.worker_detached(w, time(now));
                    q.push(now + LOSS_GRACE, Ev::LossDue { worker: w });
                }
            }
        }
        self.flush(pool, q);
    }

    /// Attached to CARMI: the class is defined and the first cycle submitted.
    fn start(&mut self, pool: &mut Pool, q: &mut Queue) {
        if self.master.started {
            return;
        }
        self.master.started = true;
        let now = time(q.now);
        let define = Request::DefineClass {
            name: CLASS.into(),
            expression: "Mips > 0".into(),
            rank: None,
        };
        self.request(define, pool, q);
        self.sched.set_class(CLASS, self.cfg.hosts_wanted, now);
        self.submit_cycle(q.now);
    }

    fn submit_cycle(&mut self, now: f64) {
        let cycle = CycleId(u64::from(self.master.cycle));
        for i in 0..self.cfg.profile.len() {
            self.sched.submit(StepId(i as u64), Some(cycle), time(now));
        }
        self.sched.dispatch(time(now));
    }

    /// An event on the server's CARMI connection, as the server takes it.
    fn on_event(&mut self, event: Event, pool: &mut Pool, q: &mut Queue) {
        let now = time(q.now);
        match event {
            Event::HostsAdded {
                request,
                hosts,
                remaining,
            } => {
                let Some(class) = self.host_requests.get(&request).cloned() else {
                    return;
                };
                if remaining == 0 {
                    self.host_requests.remove(&request);
                }
                let ids: Vec<HostId> = hosts.iter().map(|h| h.host).collect();
                self.request(Request::SuspendNotify { hosts: ids.clone() }, pool, q);
                self.request(Request::ResumeNotify { hosts: ids.clone() }, pool, q);
                self.request(Request::DeleteNotify { hosts: ids }, pool, q);
                for h in hosts {
                    // The speed as the server reads it from the machine ad
                    // (`SpeedSource::MachineAd` on `Speed`, reference 1).
                    let speed = wodi::speed::score_from_ad(&h.ad, "Speed");
                    self.sched.host_added(h.host, &class, speed, now);
                }
            }
            Event::HostDeleted { host, .. } => self.sched.host_lost(host, now),
            Event::HostSuspended { host, .. } => self.sched.host_suspended(host, now),
            Event::HostResumed { host, .. } => self.sched.host_resumed(host, now),
            Event::ProcessStarted { request, .. } => {
                self.spawns.remove(&request);
            }
            Event::ProcessExited { request, .. } => {
                // It never started: its local RM refused it.
                if let Some(worker) = self.spawns.remove(&request) {
                    self.sched.spawn_failed(worker, false, now);
                }
            }
            Event::Failed { request, failure } => {
                if self.cancelled.remove(&request) {
                    self.host_requests.remove(&request);
                } else if let Some(class) = self.host_requests.remove(&request) {
                    tracing::warn!(%class, ?failure, "a simulated host request failed");
                    self.sched.hosts_not_granted(&class, u32::MAX, now);
                } else if let Some(worker) = self.spawns.remove(&request) {
                    let suspended = failure.code == FailureCode::HostSuspended;
                    self.sched.spawn_failed(worker, suspended, now);
                }
            }
            Event::Done { .. } => {}
        }
    }

    /// Carries out the core's decisions and re-arms its timer.
    pub fn flush(&mut self, pool: &mut Pool, q: &mut Queue) {
        while let Some(out) = self.sched.poll_output() {
            match out {
                Output::RequestHosts { class, count } => {
                    let body = Request::AddHosts {
                        class: class.clone(),
                        count,
                        increment: 1,
                    };
                    let id = self.request(body, pool, q);
                    self.host_requests.insert(id, class);
                }
                Output::CancelRequests { class } => {
                    let ids: Vec<RequestId> = self
                        .host_requests
                        .iter()
                        .filter(|(id, c)| **c == class && !self.cancelled.contains(id))
                        .map(|(id, _)| *id)
                        .collect();
                    for target in ids {
                        self.cancelled.insert(target);
                        self.request(Request::CancelRequest { request: target }, pool, q);
                    }
                }
                Output::ExcludeHost { class, host } => {
                    let body = Request::ExcludeHosts {
                        class,
                        hosts: vec![host],
                    };
                    self.request(body, pool, q);
                }
                Output::ReleaseHost { host } => {
                    self.request(Request::DelHosts { hosts: vec![host] }, pool, q);
                }
                Output::Spawn { host, worker } => {
                    let body = Request::ClassSpawn {
                        executable: worker_exe(),
                        args: vec![format!("{WORKER_ARG}{}", worker.0)],
                        target: SpawnTarget::Host(host),
                        output: Default::default(),
                    };
                    let id = self.request(body, pool, q);
                    self.spawns.insert(id, worker);
                }
                Output::Assign {
                    ticket,
                    step,
                    worker,
                } => {
                    if let Some(w) = self.workers.get_mut(&worker) {
                        w.queue.push_back((ticket, step));
                    } else {
                        // Its process ended and its loss is not decided yet.
                        self.sched.assign_failed(worker, ticket, time(q.now));
                    }
                    self.start_next(worker, q);
                }
                // Simulated workers never crash, so no step fails.
                Output::StepFailed { .. } => {}
            }
        }
        if let Some(d) = self.sched.next_deadline()
            && self.armed.is_none_or(|a| d < a)
        {
            self.armed = Some(d);
            q.push(d.as_secs_f64(), Ev::Deadline(d));
        }
    }

    /// A worker's step finished: the result goes to the core and, if it is
    /// the first, to the master.
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
        let verdict = self.sched.result(
            worker,
            c.ticket,
            time(cpu),
            time(now - c.started),
            time(now),
        );
        if verdict == Verdict::Deliver {
            self.delivered(now);
        }
        self.start_next(worker, q);
    }

    /// The master got one more result of its cycle.
    fn delivered(&mut self, now: f64) {
        let m = &mut self.master;
        m.open -= 1;
        if m.open > 0 {
            return;
        }
        m.cycle_s
            .push(now - m.cycle_start.max(self.first_ready.unwrap_or(0.0)));
        m.cycle += 1;
        if m.cycle == self.cfg.cycles {
            m.done = true;
            self.sched.finish(time(now));
            return;
        }
        m.cycle_start = now;
        if let Some(tolerance) = self.cfg.fewest_hosts {
            let n = self.cfg.profile.len() as u64;
            let steps: Vec<StepId> = (0..n).map(StepId).collect();
            if let Some(k) = self.sched.fewest_hosts(&steps, tolerance) {
                let k = m.hold.update(k.min(self.cfg.hosts_wanted));
                self.sched.set_class(CLASS, k, time(now));
            }
        }
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

    /// Starts the worker's next ticket if it is idle and may run.
    fn start_next(&mut self, worker: WorkerId, q: &mut Queue) {
        let now = q.now;
        let Some(w) = self.workers.get(&worker) else {
            return;
        };
        if !w.ready || w.current.is_some() || self.stopped.contains(&w.process) {
            return;
        }
        let speed = self.actual_speed(w.host);
        let times = &self.master.times;
        let w = self.workers.get_mut(&worker).expect("looked up above");
        let Some((ticket, step)) = w.queue.pop_front() else {
            return;
        };
        let work = times[step.0 as usize % times.len()];
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
