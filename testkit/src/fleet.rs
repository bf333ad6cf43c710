//! A fleet of machines that speak the real protocol to a real global RM
//! (TLS, the pool handshake, a daemon token per machine, `Advertise`,
//! heartbeats) from tasks of one process: thousands of machines without a
//! `carmi-local` process each. A machine runs nothing: a `Spawn` is answered
//! as failed. Applications attach through a machine as a local RM forwards
//! them ([`Fleet::attach`]), so that a test or benchmark can time a request
//! to its event.
//!
//! A machine can [`Fleet::vanish`]: it stops sending (heartbeats included)
//! and reading, its connection left open, as a host cut off by the network.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use carmi_api::conn::{Conn, ConnReader, ConnWriter};
use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{ConnId, JobId, RequestId};
use carmi_api::msg::{Event, FromGlobal, Request, Role, ToGlobal};
use carmi_api::token::{Grant, Power, SigningKey};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinSet;

/// How a fleet is made.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Machines; named `{prefix}{i}`.
    pub machines: usize,
    /// Slots each machine advertises.
    pub slots: u32,
    /// Prefix of the machines' names.
    pub prefix: String,
    /// Registrations under way at once (the global RM caps handshakes per
    /// address; this stays well below it).
    pub parallel: usize,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            machines: 100,
            slots: 2,
            prefix: "f".into(),
            parallel: 64,
        }
    }
}

/// What went wrong making a fleet.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A machine could not connect, register or be given a token.
    #[error("machine {machine}: {reason}")]
    Machine {
        /// Its name.
        machine: String,
        /// Why.
        reason: String,
    },
}

/// One machine's handles.
struct Machine {
    name: String,
    /// Messages for the global RM (applications' attach and requests).
    out: mpsc::UnboundedSender<ToGlobal>,
    /// What the global RM sent for applications (`Attached`, `Deliver`).
    apps: Arc<Mutex<mpsc::UnboundedReceiver<FromGlobal>>>,
    vanished: watch::Sender<bool>,
}

/// Registered machines, each a task holding its connection.
pub struct Fleet {
    machines: Vec<Machine>,
    tasks: JoinSet<()>,
    /// Heartbeats sent by every machine, for reports.
    heartbeats: Arc<AtomicUsize>,
    next_conn: AtomicUsize,
    /// What its applications present to start a job (power submit).
    submit_token: String,
}

/// An application attached through one machine of a [`Fleet`].
pub struct FleetApp {
    conn: ConnId,
    /// Its job.
    pub job: JobId,
    out: mpsc::UnboundedSender<ToGlobal>,
    events: Arc<Mutex<mpsc::UnboundedReceiver<FromGlobal>>>,
    next_request: u64,
}

impl Fleet {
    /// Registers `options.machines` machines with the global RM at `addr`
    /// (or with relays: several addresses separated by commas, spread over)
    /// (`secret` without a token: each machine presents its own daemon token
    /// signed with `key`), sending heartbeats at the period the global RM
    /// gives. Returns once every machine is registered.
    pub async fn start(
        addr: &str,
        secret: &Secret,
        key: &SigningKey,
        options: &FleetOptions,
    ) -> Result<Fleet, FleetError> {
        let heartbeats = Arc::new(AtomicUsize::new(0));
        let mut fleet = Fleet {
            machines: Vec::with_capacity(options.machines),
            tasks: JoinSet::new(),
            heartbeats: heartbeats.clone(),
            next_conn: AtomicUsize::new(1),
            submit_token: token(key, "fleet", Power::Submit, None)?,
        };
        // Each machine beats as soon as it is registered: registering
        // thousands takes longer than the heartbeat bound.
        let registering = Arc::new(tokio::sync::Semaphore::new(options.parallel.max(1)));
        let addrs: Vec<&str> = addr.split(',').map(str::trim).collect();
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
        for i in 0..options.machines {
            let name = format!("{}{i}", options.prefix);
            let secret = secret.clone().with_token(Some(daemon_token(key, &name)?));
            let (out_tx, out_rx) = mpsc::unbounded_channel();
            let (apps_tx, apps_rx) = mpsc::unbounded_channel();
            let (vanished, vanish_rx) = watch::channel(false);
            // Several addresses (relays): machine i goes to the i-th, in turn.
            let addr = addrs[i % addrs.len()].to_string();
            let slots = options.slots;
            let (registering, ready, beats) =
                (registering.clone(), ready_tx.clone(), heartbeats.clone());
            let task_name = name.clone();
            fleet.tasks.spawn(async move {
                let permit = registering.acquire_owned().await;
                let result = register(&addr, &secret, &task_name, slots).await;
                drop(permit);
                match result {
                    Ok((conn, heartbeat)) => {
                        let _ = ready.send(Ok(()));
                        let (r, w) = conn.split();
                        serve(r, w, heartbeat, out_rx, apps_tx, vanish_rx, beats).await;
                    }
                    Err(reason) => {
                        let _ = ready.send(Err(FleetError::Machine {
                            machine: task_name,
                            reason,
                        }));
                    }
                }
            });
            fleet.machines.push(Machine {
                name,
                out: out_tx,
                apps: Arc::new(Mutex::new(apps_rx)),
                vanished,
            });
        }
        drop(ready_tx);
        for _ in 0..options.machines {
            match ready_rx.recv().await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    fleet.tasks.abort_all();
                    return Err(e);
                }
                None => break,
            }
        }
        Ok(fleet)
    }

    /// How many machines the fleet has.
    pub fn len(&self) -> usize {
        self.machines.len()
    }

    /// Whether the fleet has no machine.
    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    /// Machine `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.machines[i].name
    }

    /// Heartbeats sent so far by all machines.
    pub fn heartbeats(&self) -> usize {
        self.heartbeats.load(Ordering::Relaxed)
    }

    /// Machine `i` goes silent: no heartbeat, nothing read, the connection
    /// left open (a cut link, not a closed one).
    pub fn vanish(&self, i: usize) {
        let _ = self.machines[i].vanished.send(true);
    }

    /// Attaches an application started by hand on machine `i` (a new job),
    /// as its local RM would forward it. One application per machine at a
    /// time: they share the machine's stream of application messages.
    pub async fn attach(&self, i: usize, patience: Duration) -> Result<FleetApp, String> {
        let m = &self.machines[i];
        let conn = ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed) as u64);
        let attach = ToGlobal::AppAttach {
            conn,
            job: None,
            process: None,
            endpoint: "127.0.0.1:1".into(),
            token: Some(shown_to(&self.submit_token, &m.name)),
        };
        m.out
            .send(attach)
            .map_err(|_| format!("{}: its connection ended", m.name))?;
        let mut rx = m.apps.lock().await;
        let job = tokio::time::timeout(patience, async {
            while let Some(msg) = rx.recv().await {
                if let FromGlobal::Attached { conn: c, job, .. } = msg
                    && c == conn
                {
                    return Some(job);
                }
            }
            None
        })
        .await
        .map_err(|_| format!("{}: no Attached within {patience:?}", m.name))?
        .ok_or_else(|| format!("{}: its connection ended", m.name))?;
        drop(rx);
        Ok(FleetApp {
            conn,
            job,
            out: m.out.clone(),
            events: m.apps.clone(),
            next_request: 1,
        })
    }

    /// Ends every machine's connection.
    pub async fn stop(mut self) {
        self.machines.clear();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl FleetApp {
    /// Sends `body` as a request; returns its id.
    pub fn request(&mut self, body: Request) -> Result<RequestId, String> {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let msg = ToGlobal::Forward {
            conn: self.conn,
            id,
            body,
        };
        self.out
            .send(msg)
            .map_err(|_| "the machine's connection ended".to_string())?;
        Ok(id)
    }

    /// The next event for this application, within `patience`.
    pub async fn event(&mut self, patience: Duration) -> Result<Event, String> {
        let mut rx = self.events.lock().await;
        tokio::time::timeout(patience, async {
            while let Some(msg) = rx.recv().await {
                if let FromGlobal::Deliver { conn, event } = msg
                    && conn == self.conn
                {
                    return Some(event);
                }
            }
            None
        })
        .await
        .map_err(|_| format!("no event within {patience:?}"))?
        .ok_or_else(|| "the machine's connection ended".to_string())
    }
}

/// A daemon token for machine `name`, good for a day.
fn daemon_token(key: &SigningKey, name: &str) -> Result<String, FleetError> {
    token(key, name, Power::Daemon, Some(name))
}

fn token(
    key: &SigningKey,
    name: &str,
    power: Power,
    machine: Option<&str>,
) -> Result<String, FleetError> {
    let grant = Grant {
        identity: name.into(),
        power,
        machine: machine.map(Into::into),
        lifetime_s: 24 * 3600,
    };
    key.issue(&grant, carmi_api::token::now_unix())
        .map(|(token, _)| token)
        .map_err(|e| FleetError::Machine {
            machine: name.into(),
            reason: format!("token: {e}"),
        })
}

type GlobalConn = Conn<ToGlobal, FromGlobal>;

/// Connects as local RM `name` and registers `slots` slots; the connection
/// and the heartbeat period the global RM asked for.
async fn register(
    addr: &str,
    secret: &Secret,
    name: &str,
    slots: u32,
) -> Result<(GlobalConn, Duration), String> {
    let patience = Duration::from_secs(60);
    // As a local RM dials: with TCP_NODELAY, so that a small request is
    // not held back behind an unacknowledged heartbeat.
    let stream = carmi_api::net::dial(addr, patience)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let s = carmi_api::tls::connect(stream)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
    let role = Role::Local { name: name.into() };
    tokio::time::timeout(
        patience,
        handshake::client_bound(&mut r, &mut w, secret, &role, &s.binding),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| format!("handshake: {e}"))?;
    let mut conn = GlobalConn::from_parts(r, w);
    let ad = ToGlobal::Advertise {
        ad: format!(
            "[ Name = \"{name}\"; Machine = \"{name}\"; Arch = \"X86_64\"; OpSys = \"LINUX\"; \
             Memory = 4096; Cpus = {slots}; Mips = 1000 ]"
        ),
        slots,
        running: vec![],
    };
    conn.send(&ad, &[])
        .await
        .map_err(|e| format!("advertise: {e}"))?;
    let answer = tokio::time::timeout(patience, conn.recv())
        .await
        .map_err(|_| "no Registered in time".to_string())?;
    match answer {
        Ok(Some((FromGlobal::Registered { heartbeat_ms, .. }, _))) => {
            Ok((conn, Duration::from_millis(heartbeat_ms.max(10))))
        }
        other => Err(format!("expected Registered, got {other:?}")),
    }
}

/// One machine: heartbeats, applications' messages out, answers in, until
/// the connection ends; silent once `vanished`.
async fn serve(
    mut r: ConnReader<FromGlobal>,
    mut w: ConnWriter<ToGlobal>,
    heartbeat: Duration,
    mut out: mpsc::UnboundedReceiver<ToGlobal>,
    apps: mpsc::UnboundedSender<FromGlobal>,
    mut vanished: watch::Receiver<bool>,
    beats: Arc<AtomicUsize>,
) {
    // Spread over the period, so that thousands of machines do not beat at once.
    let phase = Duration::from_micros(rand_below(heartbeat.as_micros() as u64));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + phase, heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let hb = ToGlobal::Heartbeat { update: String::new() };
                if w.send(&hb, &[]).await.is_err() {
                    return;
                }
                beats.fetch_add(1, Ordering::Relaxed);
            }
            msg = out.recv() => {
                let Some(msg) = msg else { return };
                if w.send(&msg, &[]).await.is_err() {
                    return;
                }
            }
            frame = r.recv() => match frame {
                Ok(Some((msg, _))) => {
                    if let Some(answer) = answer(msg, &apps) && w.send(&answer, &[]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            _ = vanished.changed() => {
                // Silent, the socket held open until the fleet ends.
                let _keep = (r, w);
                std::future::pending::<()>().await;
                return;
            }
        }
    }
}

/// What a machine that runs nothing answers to `msg`; applications'
/// messages go to `apps`.
fn answer(msg: FromGlobal, apps: &mpsc::UnboundedSender<FromGlobal>) -> Option<ToGlobal> {
    match msg {
        FromGlobal::Spawn { process, .. } => Some(ToGlobal::Started {
            process,
            result: Err("a fleet machine runs nothing".into()),
        }),
        msg @ (FromGlobal::Attached { .. } | FromGlobal::Deliver { .. }) => {
            let _ = apps.send(msg);
            None
        }
        _ => None,
    }
}

/// A number below `n` (0 for 0), scattered by a multiplicative hash of a
/// counter: enough to spread heartbeat phases, no randomness needed.
fn rand_below(n: u64) -> u64 {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let seed = SEQ.fetch_add(1, Ordering::Relaxed) as u64;
    let x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    if n == 0 { 0 } else { x % n }
}

/// The proof an application holding `token` shows the local RM of machine
/// `name` to start a job, as that local RM forwards it.
fn shown_to(token: &str, name: &str) -> String {
    // Unique per attach (the global RM takes a forwarded proof once).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nonce = || format!("{n:016x}{:016x}", std::process::id());
    let context = carmi_api::proof::ProofContext {
        audience: carmi_api::proof::local(name),
        role: carmi_api::msg::Role::Application {
            job: None,
            process: None,
            endpoint: "127.0.0.1:1".into(),
        },
        client_nonce: nonce(),
        server_nonce: nonce(),
        binding: String::new(),
        time_unix: carmi_api::token::now_unix(),
    };
    let shown =
        carmi_api::proof::Presented::make(token, context).expect("a token with a holder key");
    shown.encode()
}
