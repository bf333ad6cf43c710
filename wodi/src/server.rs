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
//! On SIGTERM, or when the master goes away, it stops the workers and
//! releases every host before exiting.
//!
//! A worker whose connection drops is reported lost after a short grace
//! period, so that a host deletion arriving meanwhile is seen as the cause
//! (not the step: a vacated host must not count as a crash of a poison step).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::frame::FrameReader;
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, FailureCode, SpawnTarget};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::conn::{Outgoing, Writer, spawn_reader, spawn_writer};
use crate::ids::{CycleId, StepId, WorkerId};
use crate::proto::{
    ClassSpec, FromMaster, FromWorker, Hello, HelloRole, ToMaster, ToWorker, WODI_PROTOCOL,
    connect_arg,
};
use crate::sched::{ArrivalOrder, LossCause, Output, Sched, SchedConfig, Ticket, Verdict};

/// How long a peer has to send its [`Hello`].
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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
    Master(FromMaster, Bytes),
    MasterGone(Option<String>),
    Worker(WorkerId, FromWorker, Bytes),
    WorkerGone(WorkerId, u64),
    LossDue(WorkerId),
    /// Time for the master to have connected.
    MasterDue,
}

/// How long the server waits for its master before giving up.
const MASTER_TIMEOUT: Duration = Duration::from_secs(30);

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
    master: Option<Writer>,
    connect_addr: String,
    token: String,
    loss_grace: Duration,
    executable: PathBuf,
    args: Vec<String>,
    init: Bytes,
    cycle: Option<(CycleId, Bytes)>,
    workers: HashMap<WorkerId, WorkerConn>,
    generation: u64,
    data: HashMap<Ticket, Bytes>,
    steps: HashMap<Ticket, StepId>,
    host_requests: HashMap<RequestId, String>,
    spawns: HashMap<RequestId, WorkerId>,
    processes: HashMap<ProcessId, WorkerId>,
    complete: bool,
}

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
        sched: Sched::new(SchedConfig::default(), Box::new(ArrivalOrder)),
        start: Instant::now(),
        carmi,
        events_tx,
        master: None,
        connect_addr: format!("{host}:{port}"),
        token: opts.token,
        loss_grace: opts.loss_grace,
        executable: PathBuf::new(),
        args: Vec::new(),
        init: Bytes::new(),
        cycle: None,
        workers: HashMap::new(),
        generation: 0,
        data: HashMap::new(),
        steps: HashMap::new(),
        host_requests: HashMap::new(),
        spawns: HashMap::new(),
        processes: HashMap::new(),
        complete: false,
    };
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
        }
        d.flush_outputs();
    }
    d.shutdown().await;
    Ok(())
}

/// The local address this machine uses to reach `addr`, which pool machines can dial back.
fn interface_towards(addr: &str) -> anyhow::Result<String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(addr)
        .map_err(|e| anyhow::anyhow!("wodi server: cannot route to the local RM {addr}: {e}"))?;
    Ok(sock.local_addr()?.ip().to_string())
}

type Reader = FrameReader<tokio::net::tcp::OwnedReadHalf>;
type WriteHalf = tokio::net::tcp::OwnedWriteHalf;

/// Reads and checks the first frame of a connection. The reader keeps any
/// bytes that followed the hello in its buffer.
async fn read_hello(stream: TcpStream, token: &str) -> anyhow::Result<(Reader, WriteHalf, Hello)> {
    let peer = stream.peer_addr()?;
    let (r, w) = stream.into_split();
    let mut r = FrameReader::with_max(r, 64 * 1024);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, r.read::<Hello>()).await {
        Ok(Ok(Some((h, _)))) => h,
        Ok(Ok(None)) => anyhow::bail!("{peer} closed before its hello"),
        Ok(Err(e)) => anyhow::bail!("{peer} sent a bad hello: {e}"),
        Err(_) => anyhow::bail!("{peer} sent no hello within {HELLO_TIMEOUT:?}"),
    };
    if hello.version != WODI_PROTOCOL {
        anyhow::bail!(
            "{peer} speaks WoDi protocol {}, not {WODI_PROTOCOL}",
            hello.version
        );
    }
    if hello.token != token {
        anyhow::bail!("{peer} presented a wrong run token");
    }
    *r.max_mut() = crate::proto::MAX_FRAME;
    Ok((r, w, hello))
}

impl Driver {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn to_master(&self, msg: &ToMaster, payload: Bytes) {
        if let Some(m) = &self.master {
            let _ = m.send(Outgoing::new(msg, payload));
        }
    }

    fn fatal(&self, reason: &str) {
        warn!("fatal: {reason}");
        self.to_master(
            &ToMaster::Fatal {
                reason: reason.to_string(),
            },
            Bytes::new(),
        );
    }

    fn broadcast(&self, msg: &ToWorker, payload: &Bytes) {
        for w in self.workers.values() {
            let _ = w.writer.send(Outgoing::new(msg, payload.clone()));
        }
    }

    /// Handles one event of the run's own connections; `true` ends the server.
    fn on_event(&mut self, ev: Ev) -> bool {
        let now = self.now();
        match ev {
            Ev::Hello(r, w, hello) => match hello.role {
                HelloRole::Master => {
                    if self.master.is_some() {
                        warn!("a second master connected; this server serves one master");
                        let writer = spawn_writer(w);
                        let _ = writer.send(Outgoing::new(
                            &ToMaster::Fatal {
                                reason: "this server already serves a master".into(),
                            },
                            Bytes::new(),
                        ));
                        return false;
                    }
                    self.master = Some(spawn_writer(w));
                    spawn_reader(r, self.events_tx.clone(), Ev::Master, Ev::MasterGone);
                }
                HelloRole::Worker { worker } => {
                    if self.sched.find_worker_host(worker).is_none() {
                        warn!("{worker} connected but is not a live worker of this run");
                        return false;
                    }
                    self.generation += 1;
                    let generation = self.generation;
                    let writer = spawn_writer(w);
                    let _ = writer.send(Outgoing::new(&ToWorker::Init, self.init.clone()));
                    if let Some((cycle, data)) = &self.cycle {
                        let _ = writer.send(Outgoing::new(
                            &ToWorker::BeginCycle { cycle: *cycle },
                            data.clone(),
                        ));
                    }
                    self.workers
                        .insert(worker, WorkerConn { writer, generation });
                    spawn_reader(
                        r,
                        self.events_tx.clone(),
                        move |m, p| Ev::Worker(worker, m, p),
                        move |_| Ev::WorkerGone(worker, generation),
                    );
                    info!("{worker} joined");
                    self.sched.worker_joined(worker, now);
                }
            },
            Ev::Master(msg, payload) => return self.on_master(msg, payload),
            Ev::MasterGone(why) => {
                if !self.complete {
                    warn!(
                        "the master went away before completing ({}); stopping",
                        why.unwrap_or_else(|| "connection closed".into())
                    );
                }
                return true;
            }
            Ev::Worker(worker, msg, payload) => match msg {
                FromWorker::Result {
                    ticket,
                    cpu_us,
                    wall_us,
                } => {
                    let ticket = Ticket(ticket);
                    let verdict = self.sched.result(
                        worker,
                        ticket,
                        Duration::from_micros(cpu_us),
                        Duration::from_micros(wall_us),
                        now,
                    );
                    if verdict == Verdict::Deliver
                        && let Some(step) = self.step_of(ticket)
                    {
                        self.to_master(&ToMaster::Result { step }, payload);
                    }
                }
                FromWorker::Error { ticket, message } => {
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
                    let tx = self.events_tx.clone();
                    let grace = self.loss_grace;
                    tokio::spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = tx.send(Ev::LossDue(worker));
                    });
                }
            }
            Ev::MasterDue => {
                if self.master.is_none() {
                    warn!("no master connected within {MASTER_TIMEOUT:?}; stopping");
                    return true;
                }
            }
            Ev::LossDue(worker) => {
                if !self.workers.contains_key(&worker) {
                    info!("{worker} lost its connection: counted as crashed");
                    self.sched.worker_lost(worker, LossCause::Crashed, now);
                }
            }
        }
        false
    }

    /// The step id of a ticket whose data is still held; forgets it.
    fn step_of(&mut self, ticket: Ticket) -> Option<StepId> {
        self.data.remove(&ticket);
        self.steps.remove(&ticket)
    }

    fn on_master(&mut self, msg: FromMaster, payload: Bytes) -> bool {
        let now = self.now();
        match msg {
            FromMaster::Init {
                classes,
                executable,
                args,
                prefetch,
                max_attempts,
                suspend_timeout_ms,
            } => {
                let cfg = SchedConfig {
                    prefetch: prefetch.max(1),
                    max_attempts: max_attempts.max(1),
                    suspend_timeout: Duration::from_millis(suspend_timeout_ms),
                    ..SchedConfig::default()
                };
                self.sched = Sched::new(cfg, Box::new(ArrivalOrder));
                self.start = Instant::now();
                self.executable = PathBuf::from(executable);
                self.args = args;
                self.init = payload;
                for ClassSpec {
                    name,
                    requirements,
                    count,
                } in classes
                {
                    self.carmi.define_class(name.clone(), requirements);
                    self.sched.set_class(&name, count, Duration::ZERO);
                }
                self.to_master(&ToMaster::Ready, Bytes::new());
            }
            FromMaster::BeginCycle { cycle } => {
                self.sched.begin_cycle(cycle, now);
                self.broadcast(&ToWorker::BeginCycle { cycle }, &payload);
                self.cycle = Some((cycle, payload));
            }
            FromMaster::Step { step } => self.submit(step, payload, now),
            FromMaster::EndCycle { cycle } => {
                self.sched.end_cycle(cycle, now);
                self.broadcast(&ToWorker::EndCycle { cycle }, &payload);
            }
            FromMaster::Complete => {
                self.complete = true;
                self.broadcast(&ToWorker::Stop, &Bytes::new());
                self.sched.finish(now);
                self.flush_outputs();
                let stats = self.sched.stats(now);
                let json = serde_json::to_vec(&stats).expect("statistics serialize");
                self.to_master(&ToMaster::Stats, Bytes::from(json));
            }
        }
        false
    }

    fn submit(&mut self, step: StepId, data: Bytes, now: Duration) {
        let cycle = self.cycle.as_ref().map(|(c, _)| *c);
        // The core's assignments are carried out after this returns, so the
        // data is in place before any worker is sent the step.
        let ticket = self.sched.submit(step, cycle, now);
        self.data.insert(ticket, data);
        self.steps.insert(ticket, step);
    }

    fn on_carmi(&mut self, inc: Incoming) {
        let now = self.now();
        let Incoming::Rm(event) = inc else {
            if let Incoming::Disconnected(why) = inc {
                self.fatal(&format!("lost the local CARMI RM: {why}"));
            }
            return;
        };
        match event {
            Event::HostsAdded { request, hosts, .. } => {
                let Some(class) = self.host_requests.get(&request).cloned() else {
                    return;
                };
                let ids: Vec<HostId> = hosts.iter().map(|h| h.host).collect();
                self.carmi.suspend_notify(&ids);
                self.carmi.resume_notify(&ids);
                self.carmi.delete_notify(&ids);
                for h in hosts {
                    info!("host {} ({}) added to class {class}", h.host, h.name);
                    self.sched.host_added(h.host, &class, None, now);
                }
            }
            Event::HostDeleted { host, reason, .. } => {
                info!("host {host} deleted: {reason}");
                self.sched.host_lost(host, now);
            }
            Event::HostSuspended { host, .. } => self.sched.host_suspended(host, now),
            Event::HostResumed { host, .. } => self.sched.host_resumed(host, now),
            Event::ProcessStarted {
                request, process, ..
            } => {
                if let Some(worker) = self.spawns.remove(&request) {
                    self.processes.insert(process, worker);
                }
            }
            Event::ProcessExited {
                process, status, ..
            } => {
                if let Some(worker) = self.processes.remove(&process) {
                    info!("{worker} ({process}) exited: {status:?}");
                    // The connection's own loss (with its grace period) decides;
                    // a worker that never connected is lost here.
                    if !self.workers.contains_key(&worker) {
                        let tx = self.events_tx.clone();
                        let grace = self.loss_grace;
                        tokio::spawn(async move {
                            tokio::time::sleep(grace).await;
                            let _ = tx.send(Ev::LossDue(worker));
                        });
                    }
                }
            }
            Event::Failed { request, failure } => {
                if let Some(class) = self.host_requests.remove(&request) {
                    warn!("request for hosts of {class} failed: {}", failure.message);
                    self.sched.hosts_not_granted(&class, u32::MAX, now);
                    self.fatal(&format!(
                        "the pool refused hosts of class {class}: {}",
                        failure.message
                    ));
                } else if let Some(worker) = self.spawns.remove(&request) {
                    warn!("spawning {worker} failed: {}", failure.message);
                    if failure.code == FailureCode::BadExecutable {
                        // Every host would refuse it the same way.
                        self.fatal(&format!(
                            "the worker executable {} cannot be used: {}",
                            self.executable.display(),
                            failure.message
                        ));
                    }
                    self.sched.worker_lost(worker, LossCause::Crashed, now);
                } else {
                    warn!("CARMI request {request} failed: {}", failure.message);
                }
            }
            Event::Done { .. } => {}
        }
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
                    let data = self.data.get(&ticket).cloned().unwrap_or_default();
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
                Output::ReleaseHost { host } => {
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
                    self.steps.remove(&ticket);
                    self.to_master(&ToMaster::StepFailed { step, reason }, Bytes::new());
                }
            }
        }
    }

    async fn shutdown(&mut self) {
        let now = self.now();
        self.broadcast(&ToWorker::Stop, &Bytes::new());
        self.sched.finish(now);
        self.flush_outputs();
        self.carmi.flush().await;
        self.master = None;
        self.workers.clear();
        // Let the writer tasks put their last frames on the wire.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
