//! The WoDi server: the thin tokio driver around [`wodi_core::run::Run`],
//! which makes every decision of the run.
//!
//! It runs on the submit side, started by the master library. It holds the
//! only CARMI connection of the run and the TCP listener master and workers
//! connect to (proving the run's token in a [`Hello`]). It decodes what
//! arrives, gives it to the run with the time since the server started,
//! carries out the run's outputs (messages to masters and workers, CARMI
//! requests) and sleeps until the next input or the run's next deadline.
//!
//! Several masters may connect (a second one with `ServerCommand::Connect`);
//! they share the workers, which must then run the same executable. The
//! server ends when its last master leaves, when no master connects in
//! time, or on SIGTERM; it then stops the workers and releases every host.
//!
//! What stays here is what a driver must know: which connection is which,
//! and that a dropped connection is the latest of its worker (a worker that
//! reconnects has a new one; the old one's end is no news).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::ids::RequestId;
use carmi_api::msg::Event;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::warn;

use crate::conn::{
    Outgoing, Reader, WriteHalf, Writer, interface_towards, read_hello, spawn_reader, spawn_writer,
};
use crate::ids::WorkerId;
use crate::proto::{FromMaster, FromWorker, Hello, HelloRole};
use bytes::Bytes;
use wodi_core::run::{CarmiCall, CarmiRequests, MasterId, Output, Run, RunConfig};

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
    /// How long after a worker's connection drops it is lost (see
    /// [`RunConfig::loss_grace`]).
    pub loss_grace: Duration,
}

/// What the connection tasks report to the loop.
enum Ev {
    Hello(Reader, WriteHalf, Hello),
    Master(MasterId, FromMaster, Bytes),
    MasterGone(MasterId, Option<String>),
    Worker(WorkerId, FromWorker, Bytes),
    WorkerGone(WorkerId, u64),
}

/// The connections beside the run.
struct Driver {
    run: Run,
    start: Instant,
    carmi: Carmi,
    events_tx: mpsc::UnboundedSender<Ev>,
    masters: HashMap<MasterId, Writer>,
    /// Each worker's connection, with a number telling it from a later one.
    workers: HashMap<WorkerId, (Writer, u64)>,
    generation: u64,
    /// What the run last published on its job (`SetJobAttrs`), and the
    /// requests doing it, whose answers are not the run's business.
    progress: (Vec<(String, String)>, HashSet<RequestId>),
    /// The server started its job by hand (no `CARMI_JOB`): it is the job's
    /// first process, whose exit no local RM sees.
    root: bool,
}

/// How often the run's progress is published on its job (when it changed).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

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
    spawn_acceptor(listener, events_tx.clone(), opts.token.clone());
    let mut cfg = RunConfig::new(opts.token, format!("{host}:{port}"));
    cfg.loss_grace = opts.loss_grace;
    let start = Instant::now();
    let mut d = Driver {
        run: Run::new(cfg, Duration::ZERO),
        start,
        carmi,
        events_tx,
        masters: HashMap::new(),
        workers: HashMap::new(),
        generation: 0,
        progress: Default::default(),
        root: opts.carmi.job.is_none(),
    };
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    while !d.run.finished() {
        let deadline = d.run.next_deadline().map(|t| d.start + t);
        let sleep = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                d.on_event(ev);
                // Take whatever else has arrived (a master sends a cycle's
                // steps back to back) before dispatching, so that ordering
                // sees the whole batch.
                tokio::task::yield_now().await;
                while !d.run.finished() {
                    let Ok(ev) = events.try_recv() else { break };
                    d.on_event(ev);
                }
            }
            inc = carmi_events.next() => match inc {
                Some(inc) => d.on_carmi(inc),
                None => {
                    let now = d.now();
                    d.run.stop("the CARMI client shut down", now);
                }
            },
            _ = sigterm.recv() => {
                // Stopped from outside: still release the pool's hosts.
                let now = d.now();
                d.run.stop("the WoDi server was stopped (SIGTERM)", now);
            }
            _ = sleep => {}
            _ = progress.tick() => d.publish_progress(),
        }
        if !d.run.finished() {
            let now = d.now();
            d.run.tick(now);
        }
        d.carry_out();
    }
    d.shutdown().await;
    Ok(())
}

/// Accepts connections and reads their hello off the loop.
fn spawn_acceptor(listener: TcpListener, tx: mpsc::UnboundedSender<Ev>, token: String) {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = tx.clone();
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
}

impl Driver {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Gives one event of the run's own connections to the run.
    fn on_event(&mut self, ev: Ev) {
        let now = self.now();
        match ev {
            Ev::Hello(r, w, hello) => match hello.role {
                HelloRole::Master => {
                    let id = self.run.master_connected(now);
                    self.masters.insert(id, spawn_writer(w));
                    spawn_reader(
                        r.retype(),
                        self.events_tx.clone(),
                        move |msg, p| Ev::Master(id, msg, p),
                        move |why| Ev::MasterGone(id, why),
                    );
                }
                HelloRole::Worker { worker } => {
                    if !self.run.worker_connected(worker, now) {
                        // Not a live worker of this run: its connection closes.
                        return;
                    }
                    self.generation += 1;
                    let generation = self.generation;
                    self.workers.insert(worker, (spawn_writer(w), generation));
                    spawn_reader(
                        r.retype(),
                        self.events_tx.clone(),
                        move |m, p| Ev::Worker(worker, m, p),
                        move |_| Ev::WorkerGone(worker, generation),
                    );
                }
            },
            Ev::Master(m, msg, payload) => self.run.master_message(m, msg, payload, now),
            // Its connection is dropped once what the run had for it is sent.
            Ev::MasterGone(m, why) => self.run.master_gone(m, why, now),
            Ev::Worker(worker, msg, payload) => self.run.worker_message(worker, msg, payload, now),
            Ev::WorkerGone(worker, generation) => {
                if self
                    .workers
                    .get(&worker)
                    .is_some_and(|(_, g)| *g == generation)
                {
                    self.workers.remove(&worker);
                    self.run.worker_dropped(worker, now);
                }
            }
        }
    }

    /// An event from CARMI (or its connection ending), for the run.
    fn on_carmi(&mut self, inc: Incoming) {
        let now = self.now();
        match inc {
            Incoming::Rm(Event::Done { request, .. }) if self.progress.1.remove(&request) => {}
            Incoming::Rm(Event::Failed { request, failure })
                if self.progress.1.remove(&request) =>
            {
                warn!(
                    "the pool refused the run's progress attributes: {}",
                    failure.message
                );
            }
            Incoming::Rm(event) => self.run.carmi_event(event, now),
            Incoming::Disconnected(why) => self.run.carmi_disconnected(&why.to_string(), now),
            // What workers print (a panic, a library's warning) is worth
            // seeing where the run was started: on this server's stderr,
            // which is the master's, each line marked with its worker.
            Incoming::Output { process, data, .. } => {
                let who = self
                    .run
                    .worker_of_process(process)
                    .map_or_else(|| format!("process {process}"), |w| format!("worker {w}"));
                let text = String::from_utf8_lossy(&data);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    eprintln!("[{who}] {line}");
                }
            }
            _ => {}
        }
    }

    /// Publishes the run's progress on its job (for `carmi q` and the
    /// dashboard) if it changed since last time.
    fn publish_progress(&mut self) {
        let sched = self.run.sched();
        let attrs = wodi_core::progress::job_attrs(&sched.stats(self.now()), &sched.status());
        if attrs == self.progress.0 {
            return;
        }
        // A pool that never answers must not grow the set: the run ignores
        // an answer it did not ask for, so forgetting old ids is harmless.
        if self.progress.1.len() >= 64 {
            self.progress.1.clear();
        }
        self.progress
            .1
            .insert(self.carmi.set_job_attrs(attrs.clone()));
        self.progress.0 = attrs;
    }

    /// Carries out the run's outputs, in order.
    fn carry_out(&mut self) {
        while let Some(out) = self.run.poll_output() {
            match out {
                Output::ToMaster {
                    master,
                    msg,
                    payload,
                } => {
                    if let Some(w) = self.masters.get(&master) {
                        let _ = w.send(Outgoing::new(&msg, payload));
                    }
                }
                Output::ToWorker {
                    worker,
                    msg,
                    payload,
                } => {
                    if let Some((w, _)) = self.workers.get(&worker) {
                        let _ = w.send(Outgoing::new(&msg, payload));
                    }
                }
                Output::Carmi { call, request } => {
                    if let Some(id) = self.request(request) {
                        self.run.issued(call, id);
                    }
                }
            }
        }
        let run = &self.run;
        self.masters.retain(|m, _| run.has_master(*m));
    }

    /// Makes a CARMI request; its id, for the run to match the answer.
    fn request(&self, request: CarmiCall) -> Option<RequestId> {
        let c = &self.carmi;
        match request.into_requests() {
            CarmiRequests::One(body) => Some(c.send_request(body)),
            CarmiRequests::Untracked(bodies) => {
                for body in *bodies {
                    c.send_request(body);
                }
                None
            }
            CarmiRequests::Spawn {
                executable,
                args,
                target,
            } => Some(c.class_spawn(executable, args, target)),
        }
    }

    async fn shutdown(&mut self) {
        let now = self.now();
        self.run.shutdown(now);
        self.carry_out();
        if self.root {
            // The job ends when this process leaves; it leaves because it is
            // done and exits 0, which `carmi history` shows only if it is
            // said (HTCondor's `ExitCode`) before the connection closes.
            let exit = vec![("ExitCode".to_string(), "0".to_string())];
            self.carmi.set_job_attrs(exit);
        }
        self.carmi.flush().await;
        self.masters.clear();
        self.workers.clear();
        // Let the writer tasks put their last frames on the wire.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
