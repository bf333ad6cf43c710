//! The WoDi server: the thin tokio driver around [`crate::sched::Sched`].
//!
//! It runs on the submit side, started by the master library. It holds the
//! only CARMI connection of the run: it defines the master's classes, asks
//! for hosts, spawns one worker per host with `class_spawn`, and watches
//! hosts being suspended, resumed and deleted and workers exiting. Master and
//! workers connect to its TCP listener and prove the run's token in a
//! [`Hello`]. It decides nothing itself: every event goes to the core, and
//! the core's outputs are carried out here.
//!
//! Several masters may connect (a second one with
//! `ServerCommand::Connect`); they share the workers, which must then run the
//! same executable. A worker about to compute a step of another master than
//! its last one is first sent that master's init and cycle data. The server
//! ends when its last master leaves.
//!
//! On SIGTERM, or when the last master goes away, it stops the workers and
//! releases every host before exiting.
//!
//! A worker whose connection drops is reported lost after a short grace
//! period, so that a host deletion arriving meanwhile is seen as the cause
//! (not the step: a vacated host must not count as a crash of a poison step).
//!
//! Masters' messages are handled in `server/masters.rs`, CARMI's events in
//! `server/carmi.rs`; the event loop and the core's outputs stay here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::client::{Carmi, ConnectOptions, connect};
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::SpawnTarget;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::conn::{
    Outgoing, Reader, WriteHalf, Writer, interface_towards, read_hello, spawn_reader, spawn_writer,
};
use crate::ids::{CycleId, StepId, WorkerId};
use crate::order::LongestFirst;
use crate::proto::{
    FromMaster, FromWorker, Hello, HelloRole, Status, ToMaster, ToWorker, connect_arg,
};
use crate::sched::{LossCause, Output, Sched, SchedConfig, Ticket, Verdict};
use crate::speed::{BENCHMARK_STEP, BENCHMARK_TICKET, HostSpeeds, SpeedSource};

mod carmi;
mod masters;

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The run's token that master and workers must present.
    pub token: String,
    /// How to reach the local CARMI RM.
    pub carmi: ConnectOptions,
    /// Where to listen (`0.0.0.0:0` by default, so pool machines can connect).
    pub listen: String,
    /// Host name or address workers should dial; `None` picks the address of
    /// the interface that reaches the local RM.
    pub advertise_host: Option<String>,
    /// How long after a worker's connection drops it counts as crashed.
    pub loss_grace: Duration,
}

enum Ev {
    Hello(Reader, WriteHalf, Hello),
    Master(MasterId, FromMaster, Bytes),
    MasterGone(MasterId, Option<String>),
    Worker(WorkerId, FromWorker, Bytes),
    WorkerGone(WorkerId, u64),
    LossDue(WorkerId),
    /// Time for the master to have connected.
    MasterDue,
    /// Time to ask again for the hosts of a class the pool could not serve for now.
    RetryHosts(String),
}

/// How long to wait before asking again for hosts the pool could not serve
/// for now (its local RM reconnecting to the global RM, say).
const HOST_RETRY: Duration = Duration::from_secs(1);

/// How long the server waits for its master before giving up.
const MASTER_TIMEOUT: Duration = Duration::from_secs(30);

/// A master connected to this server (several may share its workers).
type MasterId = u64;

/// What the server keeps about one master.
struct MasterConn {
    writer: Writer,
    init: Bytes,
    cycle: Option<(CycleId, Bytes)>,
    /// Hosts this master added to each class's desired count.
    classes: Vec<(String, u32)>,
    /// It sent `Complete` (or left): its steps are cancelled, its hosts no longer wanted.
    retired: bool,
}

struct WorkerConn {
    writer: Writer,
    /// Distinguishes this connection from a later one of the same worker id.
    generation: u64,
}

/// Everything the driver keeps beside the core.
struct Driver {
    sched: Sched,
    start: Instant,
    carmi: Carmi,
    events_tx: mpsc::UnboundedSender<Ev>,
    masters: HashMap<MasterId, MasterConn>,
    next_master: MasterId,
    /// Whether the first master's `Init` configured the run.
    started: bool,
    /// Desired hosts per class, summed over masters.
    desired: HashMap<String, u32>,
    /// The master whose init (and cycle) data each worker holds now.
    context: HashMap<WorkerId, MasterId>,
    connect_addr: String,
    token: String,
    loss_grace: Duration,
    executable: PathBuf,
    args: Vec<String>,
    workers: HashMap<WorkerId, WorkerConn>,
    generation: u64,
    data: HashMap<Ticket, Bytes>,
    steps: HashMap<Ticket, (MasterId, StepId)>,
    host_requests: HashMap<RequestId, String>,
    /// With `Policies::fewest_hosts`: the tolerance, the count's hysteresis,
    /// and the steps of the cycle under way (one class, one master).
    fewest: Option<(f64, crate::plan::Hysteresis)>,
    cycle_steps: Vec<StepId>,
    /// Host requests withdrawn (`Output::CancelRequests`).
    cancelled: std::collections::HashSet<RequestId>,
    /// The cancel requests themselves: one may fail because the host
    /// request was answered meanwhile, which is expected, not a problem.
    cancels: std::collections::HashSet<RequestId>,
    spawns: HashMap<RequestId, WorkerId>,
    processes: HashMap<ProcessId, WorkerId>,
    /// The last [`Status`] sent to the masters, and when.
    status: (Status, Instant),
    /// Host speeds: their source, the benchmark step, observed corrections.
    speeds: HostSpeeds,
    /// The master whose init data the benchmark step runs with.
    bench_master: Option<MasterId>,
    /// `get_host_info` requests for hosts whose ad the speed source needs.
    info_requests: HashMap<RequestId, HostId>,
    /// `exclude_hosts` requests not answered yet, with the host and class.
    exclusions: HashMap<RequestId, (HostId, String)>,
}

/// How often at most the masters hear of a changed [`Status`].
const STATUS_EVERY: Duration = Duration::from_millis(250);

/// Runs the server until the master completes or goes away. Prints
/// `listening on ADDR` on stdout first, for the master to read.
pub async fn run(opts: ServerOptions) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&opts.listen)
        .await
        .map_err(|e| anyhow::anyhow!("wodi server: cannot listen on {}: {e}", opts.listen))?;
    let port = listener.local_addr()?.port();
    let host = match &opts.advertise_host {
        Some(h) => h.clone(),
        None => interface_towards(&opts.carmi.local)?,
    };
    let (carmi, mut carmi_events) = connect(opts.carmi.clone())
        .await
        .map_err(|e| anyhow::anyhow!("wodi server: {e}"))?;
    println!("listening on 127.0.0.1:{port}");
    use std::io::Write;
    std::io::stdout().flush()?;

    let (events_tx, mut events) = mpsc::unbounded_channel();
    let accept_tx = events_tx.clone();
    let token = opts.token.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = accept_tx.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                match read_hello(stream, &token).await {
                    Ok((r, w, hello)) => {
                        let _ = tx.send(Ev::Hello(r, w, hello));
                    }
                    Err(e) => warn!("refused a connection: {e}"),
                }
            });
        }
    });

    let due = events_tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(MASTER_TIMEOUT).await;
        let _ = due.send(Ev::MasterDue);
    });
    let mut d = Driver {
        sched: Sched::new(SchedConfig::default(), Box::new(LongestFirst)),
        start: Instant::now(),
        carmi,
        events_tx,
        masters: HashMap::new(),
        next_master: 0,
        started: false,
        desired: HashMap::new(),
        context: HashMap::new(),
        connect_addr: format!("{host}:{port}"),
        token: opts.token,
        loss_grace: opts.loss_grace,
        executable: PathBuf::new(),
        args: Vec::new(),
        workers: HashMap::new(),
        generation: 0,
        data: HashMap::new(),
        steps: HashMap::new(),
        host_requests: HashMap::new(),
        cancelled: std::collections::HashSet::new(),
        cancels: std::collections::HashSet::new(),
        fewest: None,
        cycle_steps: Vec::new(),
        spawns: HashMap::new(),
        processes: HashMap::new(),
        status: (Status::default(), Instant::now()),
        speeds: HostSpeeds::new(SpeedSource::Unknown, false),
        bench_master: None,
        info_requests: HashMap::new(),
        exclusions: HashMap::new(),
    };
    let mut status_tick = tokio::time::interval(STATUS_EVERY);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let deadline = d.sched.next_deadline().map(|t| d.start + t);
        let sleep = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                if d.on_event(ev) {
                    break;
                }
                // Take whatever else has arrived (a master sends a cycle's
                // steps back to back) before dispatching, so that ordering
                // sees the whole batch.
                tokio::task::yield_now().await;
                let mut stop = false;
                while let Ok(ev) = events.try_recv() {
                    if d.on_event(ev) {
                        stop = true;
                        break;
                    }
                }
                if stop {
                    break;
                }
            }
            inc = carmi_events.next() => {
                let Some(inc) = inc else {
                    d.fatal("the CARMI client shut down");
                    break;
                };
                d.on_carmi(inc);
            }
            _ = sigterm.recv() => {
                // Stopped from outside: still release the pool's hosts.
                d.fatal("the WoDi server was stopped (SIGTERM)");
                break;
            }
            _ = sleep => {
                let now = d.now();
                d.sched.on_deadline(now);
            }
            // A change held back by the rate limit still goes out.
            _ = status_tick.tick() => {}
        }
        let now = d.now();
        d.sched.dispatch(now);
        d.flush_outputs();
        d.send_status();
    }
    d.shutdown().await;
    Ok(())
}

impl Driver {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn to_master(&self, m: MasterId, msg: &ToMaster, payload: Bytes) {
        if let Some(m) = self.masters.get(&m) {
            let _ = m.writer.send(Outgoing::new(msg, payload));
        }
    }

    /// With `Policies::fewest_hosts`, after a cycle: the fewest hosts with
    /// which that cycle's steps would end within the tolerance of their
    /// longest (once every step has history), at most what the master asked
    /// for, becomes the class's count; the core gives surplus hosts back.
    fn hold_fewest_hosts(&mut self, now: Duration) {
        let steps = std::mem::take(&mut self.cycle_steps);
        if self.masters.len() != 1 || steps.is_empty() {
            return;
        }
        let Some((tolerance, hold)) = &mut self.fewest else {
            return;
        };
        let Some((class, &asked)) = self.desired.iter().next() else {
            return;
        };
        if let Some(k) = self.sched.fewest_hosts(&steps, *tolerance) {
            let k = hold.update(k.clamp(1, asked.max(1)));
            info!("fewest hosts for the best cycle: {k} of {asked}");
            let class = class.clone();
            self.sched.set_class(&class, k, now);
        }
    }

    /// Sends the run's [`Status`] to every master if it changed, at most
    /// once per [`STATUS_EVERY`].
    fn send_status(&mut self) {
        // Checked first: this runs after every batch of events, and the
        // snapshot walks every ticket of the run.
        if self.status.1.elapsed() < STATUS_EVERY {
            return;
        }
        let st = self.sched.status();
        if st == self.status.0 {
            return;
        }
        self.status = (st, Instant::now());
        for m in self.masters.keys() {
            self.to_master(*m, &ToMaster::Status(st), Bytes::new());
        }
    }

    /// Tells every master that the run cannot go on.
    fn fatal(&self, reason: &str) {
        warn!("fatal: {reason}");
        for m in self.masters.keys() {
            self.to_master(
                *m,
                &ToMaster::Fatal {
                    reason: reason.to_string(),
                },
                Bytes::new(),
            );
        }
    }

    /// Sends to every worker, or only to those holding master `m`'s context.
    fn broadcast(&self, only: Option<MasterId>, msg: &ToWorker, payload: &Bytes) {
        for (id, w) in &self.workers {
            if only.is_none() || self.context.get(id).copied() == only {
                let _ = w.writer.send(Outgoing::new(msg, payload.clone()));
            }
        }
    }

    /// Master `m` is done: its open steps are cancelled and its hosts are no
    /// longer wanted (idle surplus hosts are released by the core). The last
    /// master to finish ends the run: workers stop and every host goes back.
    fn retire(&mut self, m: MasterId, now: Duration) {
        let Some(conn) = self.masters.get_mut(&m) else {
            return;
        };
        if conn.retired {
            return;
        }
        conn.retired = true;
        let classes = std::mem::take(&mut conn.classes);
        let mine: Vec<Ticket> = self
            .steps
            .iter()
            .filter(|(_, (owner, _))| *owner == m)
            .map(|(t, _)| *t)
            .collect();
        for t in mine {
            self.sched.cancel(t);
            self.steps.remove(&t);
            self.data.remove(&t);
        }
        if self.masters.values().any(|c| !c.retired) {
            for (name, count) in classes {
                let d = self.desired.entry(name.clone()).or_default();
                *d = d.saturating_sub(count);
                let d = *d;
                self.sched.set_class(&name, d, now);
            }
        } else {
            self.broadcast(None, &ToWorker::Stop, &Bytes::new());
            self.sched.finish(now);
        }
    }

    /// Handles one event of the run's own connections; `true` ends the server.
    fn on_event(&mut self, ev: Ev) -> bool {
        let now = self.now();
        match ev {
            Ev::Hello(r, w, hello) => match hello.role {
                HelloRole::Master => {
                    let id = self.next_master;
                    self.next_master += 1;
                    self.masters.insert(
                        id,
                        MasterConn {
                            writer: spawn_writer(w),
                            init: Bytes::new(),
                            cycle: None,
                            classes: Vec::new(),
                            retired: false,
                        },
                    );
                    spawn_reader(
                        r,
                        self.events_tx.clone(),
                        move |msg, p| Ev::Master(id, msg, p),
                        move |why| Ev::MasterGone(id, why),
                    );
                }
                HelloRole::Worker { worker } => {
                    if self.sched.find_worker_host(worker).is_none() {
                        warn!("{worker} connected but is not a live worker of this run");
                        return false;
                    }
                    self.generation += 1;
                    let generation = self.generation;
                    // Init and cycle data go out with its first step (`switch_context`).
                    let writer = spawn_writer(w);
                    self.workers
                        .insert(worker, WorkerConn { writer, generation });
                    spawn_reader(
                        r,
                        self.events_tx.clone(),
                        move |m, p| Ev::Worker(worker, m, p),
                        move |_| Ev::WorkerGone(worker, generation),
                    );
                    info!("{worker} joined");
                    let host = self.sched.find_worker_host(worker).expect("checked above");
                    if self.speeds.worker_connected(worker, host, now) {
                        self.send_benchmark(worker);
                    } else {
                        self.sched.worker_joined(worker, now);
                    }
                }
            },
            Ev::Master(m, msg, payload) => self.on_master(m, msg, payload),
            Ev::MasterGone(m, why) => {
                if self.masters.get(&m).is_some_and(|c| !c.retired) {
                    warn!(
                        "master {m} went away before completing ({})",
                        why.unwrap_or_else(|| "connection closed".into())
                    );
                }
                self.retire(m, now);
                self.masters.remove(&m);
                if self.masters.is_empty() {
                    return true;
                }
            }
            Ev::Worker(worker, msg, payload) => match msg {
                FromWorker::Result {
                    ticket,
                    cpu_us,
                    wall_us,
                } => {
                    if ticket == BENCHMARK_TICKET {
                        let took = self.sched.learned_time(
                            Duration::from_micros(cpu_us),
                            Duration::from_micros(wall_us),
                        );
                        self.benchmark_answered(worker, Some(took), now);
                        return false;
                    }
                    let ticket = Ticket(ticket);
                    // Every copy's time says how fast its host is; the
                    // speed is corrected before the history learns from it.
                    let expect = self
                        .steps
                        .get(&ticket)
                        .and_then(|(_, step)| self.speeds.expect(&self.sched, worker, *step));
                    if let Some(exp) = expect {
                        let took = self.sched.learned_time(
                            Duration::from_micros(cpu_us),
                            Duration::from_micros(wall_us),
                        );
                        self.speeds.observe_result(&mut self.sched, exp, took);
                    }
                    let verdict = self.sched.result(
                        worker,
                        ticket,
                        Duration::from_micros(cpu_us),
                        Duration::from_micros(wall_us),
                        now,
                    );
                    if verdict == Verdict::Deliver
                        && let Some((m, step)) = self.step_of(ticket)
                    {
                        self.to_master(m, &ToMaster::Result { step }, payload);
                    }
                }
                FromWorker::Error { ticket, message } => {
                    if ticket == BENCHMARK_TICKET {
                        warn!("{worker}: the speed benchmark failed: {message}");
                        self.benchmark_answered(worker, None, now);
                        return false;
                    }
                    self.sched.step_error(worker, Ticket(ticket), &message, now);
                }
            },
            Ev::WorkerGone(worker, generation) => {
                if self
                    .workers
                    .get(&worker)
                    .is_some_and(|w| w.generation == generation)
                {
                    self.workers.remove(&worker);
                    // No steps for it until it is back or its loss decided.
                    self.sched.worker_detached(worker, now);
                    let tx = self.events_tx.clone();
                    let grace = self.loss_grace;
                    tokio::spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = tx.send(Ev::LossDue(worker));
                    });
                }
            }
            Ev::MasterDue => {
                if self.masters.is_empty() {
                    warn!("no master connected within {MASTER_TIMEOUT:?}; stopping");
                    return true;
                }
            }
            Ev::RetryHosts(class) => self.sched.request_missing(&class),
            Ev::LossDue(worker) => {
                if !self.workers.contains_key(&worker) {
                    self.speeds.worker_gone(worker);
                    info!("{worker} lost its connection: counted as crashed");
                    self.sched.worker_lost(worker, LossCause::Crashed, now);
                }
            }
        }
        false
    }

    /// Carries out the core's decisions.
    fn flush_outputs(&mut self) {
        while let Some(out) = self.sched.poll_output() {
            match out {
                Output::Assign {
                    ticket,
                    step,
                    worker,
                } => {
                    if !self.workers.contains_key(&worker) {
                        // Its connection dropped and its loss is not decided
                        // yet: the step goes back to the core, not lost here.
                        warn!("{worker} has no connection: {step} goes back to the queue");
                        let now = self.now();
                        self.sched.assign_failed(worker, ticket, now);
                        continue;
                    }
                    let data = self.data.get(&ticket).cloned().unwrap_or_default();
                    if let Some((m, _)) = self.steps.get(&ticket).copied() {
                        self.switch_context(worker, m);
                    }
                    if let Some(w) = self.workers.get(&worker) {
                        let _ = w.writer.send(Outgoing::new(
                            &ToWorker::Step {
                                ticket: ticket.0,
                                step,
                            },
                            data,
                        ));
                    }
                }
                Output::RequestHosts { class, count } => {
                    let id = self.carmi.addhosts(class.clone(), count, 1);
                    self.host_requests.insert(id, class);
                }
                Output::CancelRequests { class } => {
                    // Hosts granted before the cancel arrives still come, as
                    // this class's, and the core judges them.
                    for (id, c) in &self.host_requests {
                        if *c == class && self.cancelled.insert(*id) {
                            self.cancels.insert(self.carmi.cancel_request(*id));
                        }
                    }
                }
                Output::ExcludeHost { class, host } => {
                    // Sent before the host's release (the next output), on
                    // the same connection: by the time the host is free, the
                    // pool no longer grants it to this class.
                    info!("excluding host {host}, retired by fast abort, from class {class}");
                    let id = self.carmi.exclude_hosts(class.clone(), &[host]);
                    self.exclusions.insert(id, (host, class));
                }
                Output::ReleaseHost { host } => {
                    self.speeds.host_gone(host);
                    self.carmi.delhosts(&[host]);
                }
                Output::Spawn { host, worker } => {
                    let mut args = self.args.clone();
                    args.push(connect_arg(&self.connect_addr, &self.token, worker));
                    let id =
                        self.carmi
                            .class_spawn(&self.executable, args, SpawnTarget::Host(host));
                    self.spawns.insert(id, worker);
                }
                Output::StepFailed {
                    ticket,
                    step,
                    reason,
                } => {
                    self.data.remove(&ticket);
                    if let Some((m, _)) = self.steps.remove(&ticket) {
                        self.to_master(m, &ToMaster::StepFailed { step, reason }, Bytes::new());
                    }
                }
            }
        }
    }

    /// Sends the benchmark step to a worker that just connected (with the
    /// init data of the master that registered it).
    fn send_benchmark(&mut self, worker: WorkerId) {
        if let Some(m) = self.bench_master {
            self.switch_context(worker, m);
        }
        let data = self.speeds.benchmark().cloned().unwrap_or_default();
        if let Some(w) = self.workers.get(&worker) {
            let msg = ToWorker::Step {
                ticket: BENCHMARK_TICKET,
                step: StepId(BENCHMARK_STEP),
            };
            let _ = w.writer.send(Outgoing::new(&msg, data));
        }
    }

    /// The benchmark's answer: the host's speed is set, and the worker is
    /// given to the core for real steps.
    fn benchmark_answered(&mut self, worker: WorkerId, took: Option<Duration>, now: Duration) {
        if self
            .speeds
            .benchmark_done(&mut self.sched, worker, took, now)
        {
            if let Some(t) = took {
                info!("{worker} ran the speed benchmark in {t:?}");
            }
            self.sched.worker_joined(worker, now);
        }
    }

    async fn shutdown(&mut self) {
        let now = self.now();
        self.broadcast(None, &ToWorker::Stop, &Bytes::new());
        self.sched.finish(now);
        self.flush_outputs();
        self.carmi.flush().await;
        self.masters.clear();
        self.workers.clear();
        // Let the writer tasks put their last frames on the wire.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
