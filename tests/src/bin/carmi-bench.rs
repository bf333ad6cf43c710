//! `carmi-bench`: runtime benchmarks of CARMI on localhost, printed as
//! markdown tables (each preceded by the command that produced it) for
//! BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p carmi-tests --bin carmi-bench -- [messaging|spawn|all]
//! ```
//!
//! - `messaging`: latency and throughput layer by layer, so that the cost each
//!   layer adds shows: raw TCP, CARMI's framing over the same kind of socket,
//!   and application messages between two processes through the whole client
//!   library (this program and a spawned `carmi-echo`, and again with an echo
//!   that runs its loop in a task).
//! - `spawn`: `class_spawn` of a 12 MiB executable on 16 slots, split into
//!   staging (moving the bytes into the machines' caches) and execution.
//!
//! `carmi-bench echo-task` is not for people: the messaging benchmark spawns
//! this program that way as a second echo, one that runs its loop in a task.
//!
//! The benchmark builds what it starts (the daemons through
//! [`carmi_tests::bin_dir`], `carmi-echo` itself) with the profile it was built
//! with. It only prints: no timing is asserted anywhere.

use std::collections::{HashSet, VecDeque};
use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::client::{Carmi, ConnectOptions, EventStream, Incoming, connect};
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::Secret;
use carmi_api::ids::{HostId, ProcessId, RequestId};
use carmi_api::msg::{Event, ExitStatus, PeerMessage, Reply, SpawnTarget};
use carmi_tests::Pool;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Size of the messages whose round trip is timed.
const SMALL: usize = 8;
/// Round trips run before timing starts (connections, caches, runtime threads warm up).
const WARMUP: usize = 1_000;
/// Round trips timed.
const ROUND_TRIPS: usize = 10_000;
/// Size of the bulk messages.
const BULK: usize = 1 << 20;
/// Bulk messages per layer and kind of run: 1 GiB.
const BULK_COUNT: usize = 1024;
/// Bulk messages in flight at once when they are echoed: enough to keep
/// both directions busy, few enough that no queue grows without bound.
const WINDOW: usize = 8;
/// Tag of timed small messages (`carmi-echo` answers with tag + 1).
const TAG_PING: u32 = 10;
/// Tag of bulk messages.
const TAG_BULK: u32 = 20;
/// Tag asking a sink to acknowledge everything before it (an echo answers it
/// like any message, which acknowledges just as well: messages stay in order).
const TAG_SYNC: u32 = 30;
/// Tag of bulk messages that `carmi-bench echo-task` drops instead of echoing.
const TAG_ONE_WAY: u32 = 40;

/// Machines of the spawn benchmark's pool.
const SPAWN_MACHINES: usize = 8;
/// Slots per machine: 8 x 2 = 16 processes.
const SPAWN_SLOTS: u32 = 2;
/// Processes started per run.
const SPAWN_COUNT: usize = SPAWN_MACHINES * SPAWN_SLOTS as usize;
/// Size of the spawned executable.
const EXE_SIZE: usize = 12 << 20;
/// Repetitions of each spawn run (a fresh executable each time).
const SPAWN_REPS: usize = 5;

/// How long any single wait (and the whole messaging run) may take before
/// the benchmark gives up.
const PATIENCE: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let (messaging, spawn) = match what.as_str() {
        ECHO_TASK => return echo_task(),
        "messaging" => (true, false),
        "spawn" => (false, true),
        "all" => (true, true),
        _ => {
            eprintln!(
                "usage: cargo run --release -p carmi-tests --bin carmi-bench -- [messaging|spawn|all]"
            );
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!("Host: {}\n", host_description());
    if cfg!(debug_assertions) {
        println!("**Built without `--release`: these numbers are not representative.**\n");
    }
    let started = Instant::now();
    let result = (|| -> Result<()> {
        if messaging {
            run_messaging(&rt)?;
        }
        if spawn {
            run_spawn(&rt)?;
        }
        Ok(())
    })();
    eprintln!(
        "carmi-bench: finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// CPU model, CPU count and kernel, so that tables from different machines are not confused.
fn host_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{cpu}, {cpus} CPUs, Linux {kernel}")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews timings.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The command that reproduces a section, printed above its tables.
fn print_command(section: &str) {
    println!("```\ncargo run --release -p carmi-tests --bin carmi-bench -- {section}\n```\n");
}

/// The argument that makes this program an echo (see [`echo_task`]).
const ECHO_TASK: &str = "echo-task";

/// `carmi-echo` with its loop in a spawned task instead of in `main`'s
/// `block_on`, and which drops messages tagged `TAG_ONE_WAY`. `#[tokio::main]` runs `main`'s future on the main thread, not
/// on a worker, so every message then crosses threads twice more (the
/// receiving task wakes the main thread, whose `send` wakes a worker for the
/// writing task); in a task, a worker hands messages on by itself. The
/// messaging benchmark times both kinds of echo.
fn echo_task() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = rt.block_on(async {
        let (carmi, mut events) = connect(ConnectOptions::from_env()?).await?;
        let echo = carmi.clone();
        tokio::spawn(async move {
            while let Some(item) = events.next().await {
                match item {
                    Incoming::Message { tag: 0, .. } => break,
                    Incoming::Message {
                        tag: TAG_ONE_WAY, ..
                    } => {}
                    Incoming::Message { from, tag, data } => echo.send(from, tag + 1, data),
                    _ => {}
                }
            }
        })
        .await?;
        carmi.flush().await;
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench {ECHO_TASK}: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------

/// Median and 99th percentile of a set of round trips.
#[derive(Clone, Copy)]
struct Latency {
    median: Duration,
    p99: Duration,
}

impl Latency {
    fn of(samples: &[Duration]) -> Latency {
        let mut v = samples.to_vec();
        v.sort();
        let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
        Latency {
            median: at(0.5),
            p99: at(0.99),
        }
    }
}

/// What one layer measured, summed over the rounds.
#[derive(Default)]
struct Samples {
    round_trips: Vec<Duration>,
    /// Time spent sending bulk messages one way, and how many.
    one_way: (Duration, usize),
    /// Time spent streaming bulk messages through the echo, and how many.
    echoed: (Duration, usize),
}

/// MiB/s of `messages` bulk messages moved in `elapsed`.
fn mib_per_s((elapsed, messages): (Duration, usize)) -> f64 {
    (messages * BULK) as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
}

fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------
// Messaging: the far ends of raw TCP and framing
// ---------------------------------------------------------------------------

/// Serves one connection with `serve` on a thread of its own with its own
/// multi-threaded runtime, standing in for a separate process.
fn far_end<F, Fut>(serve: F) -> Result<(SocketAddr, std::thread::JoinHandle<Result<()>>)>
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let thread = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener)?;
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            // On a worker thread, where a tokio program's tasks run, not on
            // the thread in `block_on`: every wake-up would then cross threads.
            tokio::spawn(serve(stream)).await?
        })
    });
    Ok((addr, thread))
}

/// Connects to a far end with Nagle off, as the client library does.
async fn dial(addr: SocketAddr) -> Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Raw far end: writes back every byte it reads, as it reads it.
async fn raw_echo(mut s: TcpStream) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n]).await?;
    }
}

/// Raw far end for one-way runs: reads a message count (4 bytes), that many
/// messages' worth of bytes, then acknowledges with one byte; until closed.
async fn raw_sink(mut s: TcpStream) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let mut count = [0u8; 4];
        match s.read_exact(&mut count).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let mut left = u32::from_be_bytes(count) as usize * BULK;
        while left > 0 {
            let n = s.read(&mut buf[..left.min(256 * 1024)]).await?;
            if n == 0 {
                return Err("raw sink: the sender closed in the middle of a run".into());
            }
            left -= n;
        }
        s.write_all(&[1]).await?;
    }
}

/// One framed connection: a frame reader and a buffered writer, as the
/// client library's peer connections have.
struct Framed {
    r: FrameReader<tokio::net::tcp::OwnedReadHalf>,
    w: BufWriter<tokio::net::tcp::OwnedWriteHalf>,
}

impl Framed {
    fn new(s: TcpStream) -> Framed {
        let (r, w) = s.into_split();
        Framed {
            r: FrameReader::new(r),
            w: BufWriter::with_capacity(64 * 1024, w),
        }
    }
}

/// Writes one framed message and hands it to the socket, as the client's peer writer does.
async fn send_frame<W: AsyncWrite + Unpin>(w: &mut W, tag: u32, body: &[u8]) -> Result<()> {
    write_frame(w, &PeerMessage { tag }, body).await?;
    w.flush().await?;
    Ok(())
}

/// The next framed message, or an error if the connection ends.
async fn recv_frame<R: AsyncRead + Unpin>(r: &mut FrameReader<R>) -> Result<(u32, Bytes)> {
    match r.read::<PeerMessage>().await? {
        Some((PeerMessage { tag }, body)) => Ok((tag, body)),
        None => Err("the framed connection closed early".into()),
    }
}

/// Framed far end: answers every message with the same body and tag + 1, like `carmi-echo`.
async fn frame_echo(s: TcpStream) -> Result<()> {
    let mut f = Framed::new(s);
    while let Some((PeerMessage { tag }, body)) = f.r.read::<PeerMessage>().await? {
        send_frame(&mut f.w, tag + 1, &body).await?;
    }
    Ok(())
}

/// Framed far end for one-way runs: drops messages, answers `TAG_SYNC` with tag + 1.
async fn frame_sink(s: TcpStream) -> Result<()> {
    let mut f = Framed::new(s);
    while let Some((PeerMessage { tag }, _)) = f.r.read::<PeerMessage>().await? {
        if tag == TAG_SYNC {
            send_frame(&mut f.w, TAG_SYNC + 1, &[]).await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Messaging: the measuring end of every layer
// ---------------------------------------------------------------------------

/// The measuring end of one layer.
enum Layer {
    /// Bytes on tokio `TcpStream`s: the floor.
    Raw { echo: TcpStream, sink: TcpStream },
    /// CARMI frames on the same kind of socket, without the client library.
    Framed { echo: Framed, sink: Framed },
    /// The client library, talking to an echo process.
    App {
        carmi: Carmi,
        events: EventStream,
        echo: ProcessId,
        /// Whether the echo drops `TAG_ONE_WAY` messages (`carmi-echo` does not).
        sink: bool,
    },
}

impl Layer {
    /// One small message there and back.
    async fn round_trip(&mut self) -> Result<()> {
        let msg = [0u8; SMALL];
        match self {
            Layer::Raw { echo, .. } => {
                let mut back = [0u8; SMALL];
                echo.write_all(&msg).await?;
                echo.read_exact(&mut back).await?;
            }
            Layer::Framed { echo, .. } => {
                send_frame(&mut echo.w, TAG_PING, &msg).await?;
                recv_frame(&mut echo.r).await?;
            }
            Layer::App {
                carmi,
                events,
                echo,
                ..
            } => {
                carmi.send(*echo, TAG_PING, Bytes::from_static(&[0; SMALL]));
                reply(events, *echo, TAG_PING + 1).await?;
            }
        }
        Ok(())
    }

    /// `count` bulk messages to a receiver that only acknowledges the last;
    /// `false` if the layer cannot (`carmi-echo` returns every message).
    async fn one_way(&mut self, count: usize, body: &Bytes) -> Result<bool> {
        match self {
            Layer::Raw { sink, .. } => {
                sink.write_all(&(count as u32).to_be_bytes()).await?;
                for _ in 0..count {
                    sink.write_all(body).await?;
                }
                sink.read_exact(&mut [0u8; 1]).await?;
            }
            Layer::Framed { sink, .. } => {
                for _ in 0..count {
                    send_frame(&mut sink.w, TAG_BULK, body).await?;
                }
                send_frame(&mut sink.w, TAG_SYNC, &[]).await?;
                recv_frame(&mut sink.r).await?;
            }
            Layer::App {
                carmi,
                events,
                echo,
                sink: true,
            } => {
                // `send` only queues: all of them are queued at once.
                for _ in 0..count {
                    carmi.send(*echo, TAG_ONE_WAY, body.clone());
                }
                carmi.send(*echo, TAG_SYNC, Bytes::new());
                reply(events, *echo, TAG_SYNC + 1).await?;
            }
            Layer::App { sink: false, .. } => return Ok(false),
        }
        Ok(true)
    }

    /// `count` bulk messages through the echo, at most `WINDOW` in flight,
    /// until the last has come back.
    async fn echoed(&mut self, count: usize, body: &Bytes) -> Result<()> {
        match self {
            Layer::Raw { echo, .. } => {
                let (mut r, mut w) = echo.split();
                let window = Semaphore::new(WINDOW);
                let send = async {
                    for _ in 0..count {
                        window.acquire().await?.forget();
                        w.write_all(body).await?;
                    }
                    Ok::<_, Box<dyn Error + Send + Sync>>(())
                };
                let receive = async {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut got = 0usize;
                    while got < count * BULK {
                        let n = r.read(&mut buf).await?;
                        if n == 0 {
                            return Err("the raw echo closed early".into());
                        }
                        // A message stops being in flight with its last byte back.
                        window.add_permits((got + n) / BULK - got / BULK);
                        got += n;
                    }
                    Ok(())
                };
                tokio::try_join!(send, receive)?;
            }
            Layer::Framed { echo, .. } => {
                let window = Semaphore::new(WINDOW);
                let Framed { r, w } = echo;
                let send = async {
                    for _ in 0..count {
                        window.acquire().await?.forget();
                        send_frame(w, TAG_BULK, body).await?;
                    }
                    Ok::<_, Box<dyn Error + Send + Sync>>(())
                };
                let receive = async {
                    for _ in 0..count {
                        let (_, back) = recv_frame(r).await?;
                        if back.len() != BULK {
                            return Err(
                                format!("the framed echo returned {} bytes", back.len()).into()
                            );
                        }
                        window.add_permits(1);
                    }
                    Ok(())
                };
                tokio::try_join!(send, receive)?;
            }
            Layer::App {
                carmi,
                events,
                echo,
                ..
            } => {
                // `send` only queues, so one loop does both sides; clones of
                // `body` share one buffer, so the sender copies nothing itself.
                let (mut sent, mut back) = (0, 0);
                while back < count {
                    while sent < count && sent - back < WINDOW {
                        carmi.send(*echo, TAG_BULK, body.clone());
                        sent += 1;
                    }
                    let data = reply(events, *echo, TAG_BULK + 1).await?;
                    if data.len() != BULK {
                        return Err(format!("the echo returned {} bytes", data.len()).into());
                    }
                    back += 1;
                }
            }
        }
        Ok(())
    }
}

/// The next message from `from` with `tag`; other items are skipped (none
/// are expected while messages are timed, and keeping them would cost time).
async fn reply(events: &mut EventStream, from: ProcessId, tag: u32) -> Result<Bytes> {
    loop {
        match events.next().await {
            Some(Incoming::Message {
                from: f,
                tag: t,
                data,
            }) if f == from && t == tag => return Ok(data),
            Some(Incoming::SendFailed { reason, .. }) => {
                return Err(format!("sending to the echo failed: {reason}").into());
            }
            Some(_) => {}
            None => return Err("the event stream ended".into()),
        }
    }
}

/// Connects as a new job's application, starts an echo (`echo_exe` with
/// `args`) on its one host and waits until the echo answers.
async fn start_echo(
    local: String,
    secret: Secret,
    echo_exe: &Path,
    args: &[&str],
) -> Result<(Carmi, Inbox, ProcessId, RequestId)> {
    let (carmi, mut inbox, hosts) = job_with_hosts(local, secret, 1).await?;
    let args = args.iter().map(|a| a.to_string());
    let spawn = carmi.class_spawn(echo_exe, args, SpawnTarget::Host(hosts[0]));
    let echo = inbox
        .take("the echo to start", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(*process),
            _ => None,
        })
        .await?;
    // The first message waits (in the RM's lookup) until the echo has attached.
    carmi.send(echo, TAG_PING, Bytes::from_static(b"hello"));
    reply(&mut inbox.events, echo, TAG_PING + 1).await?;
    Ok((carmi, inbox, echo, spawn))
}

/// Round trips timed per layer in each latency round, and bulk messages per
/// layer and kind in each bulk round: the layers take turns, so that all of
/// them see the same conditions on a machine whose load varies.
const TRIPS_PER_ROUND: usize = 1_000;
const BULK_PER_ROUND: usize = 128;

/// Measures every layer, the layers taking turns round by round.
async fn measure_layers(layers: &mut [Layer], samples: &mut [Samples]) -> Result<()> {
    let body = Bytes::from(vec![7u8; BULK]);
    for layer in layers.iter_mut() {
        for _ in 0..WARMUP {
            layer.round_trip().await?;
        }
        layer.one_way(2 * WINDOW, &body).await?;
        layer.echoed(2 * WINDOW, &body).await?;
    }
    for round in 0..ROUND_TRIPS / TRIPS_PER_ROUND {
        // Rotating who goes first spreads any drift evenly.
        for k in 0..layers.len() {
            let i = (round + k) % layers.len();
            for _ in 0..TRIPS_PER_ROUND {
                let t = Instant::now();
                layers[i].round_trip().await?;
                samples[i].round_trips.push(t.elapsed());
            }
        }
    }
    for round in 0..BULK_COUNT / BULK_PER_ROUND {
        for k in 0..layers.len() {
            let i = (round + k) % layers.len();
            let t = Instant::now();
            if layers[i].one_way(BULK_PER_ROUND, &body).await? {
                samples[i].one_way.0 += t.elapsed();
                samples[i].one_way.1 += BULK_PER_ROUND;
            }
            let t = Instant::now();
            layers[i].echoed(BULK_PER_ROUND, &body).await?;
            samples[i].echoed.0 += t.elapsed();
            samples[i].echoed.1 += BULK_PER_ROUND;
        }
    }
    Ok(())
}

/// Sets up the layers, measures them, and ends the echoes.
async fn messaging(
    far: [SocketAddr; 4],
    local: String,
    secret: Secret,
    echo_exe: PathBuf,
) -> Result<Vec<Samples>> {
    let (carmi, inbox, echo, spawn) =
        start_echo(local.clone(), secret.clone(), &echo_exe, &[]).await?;
    let ourselves = std::env::current_exe()?;
    let (carmi2, inbox2, echo2, spawn2) =
        start_echo(local, secret, &ourselves, &[ECHO_TASK]).await?;
    let app = |carmi: &Carmi, inbox: Inbox, echo, sink| {
        // Nothing that is kept for later is needed after this point.
        Layer::App {
            carmi: carmi.clone(),
            events: inbox.events,
            echo,
            sink,
        }
    };
    let mut layers = vec![
        Layer::Raw {
            echo: dial(far[0]).await?,
            sink: dial(far[1]).await?,
        },
        Layer::Framed {
            echo: Framed::new(dial(far[2]).await?),
            sink: Framed::new(dial(far[3]).await?),
        },
        app(&carmi, inbox, echo, false),
        app(&carmi2, inbox2, echo2, true),
    ];
    let mut samples: Vec<Samples> = layers.iter().map(|_| Samples::default()).collect();
    measure_layers(&mut layers, &mut samples).await?;

    // Closing the raw and framed connections ends their far ends; tag 0 ends an echo.
    let mut streams = layers.into_iter().filter_map(|l| match l {
        Layer::App { events, .. } => Some(events),
        _ => None,
    });
    for (carmi, echo, spawn) in [(carmi, echo, spawn), (carmi2, echo2, spawn2)] {
        let events = streams.next().expect("one event stream per echo");
        let mut inbox = Inbox::new(events);
        carmi.send(echo, 0, Bytes::new());
        carmi.flush().await;
        inbox
            .take("an echo to exit", |x| match x {
                Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
                _ => None,
            })
            .await?;
    }
    Ok(samples)
}

/// Builds `carmi-echo` with this program's profile (`cargo run --bin
/// carmi-bench` builds only the benchmark) and returns its path, next to ours.
fn build_echo() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", "carmi-tests", "--bin", "carmi-echo"]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    if !cmd.status()?.success() {
        return Err("building carmi-echo failed".into());
    }
    let path = std::env::current_exe()?.with_file_name("carmi-echo");
    if !path.exists() {
        return Err(format!("carmi-echo was built, but not at {}", path.display()).into());
    }
    Ok(path)
}

fn run_messaging(rt: &tokio::runtime::Runtime) -> Result<()> {
    let echo_exe = build_echo()?;
    let pool = Pool::start("bench-messaging", 2, &[Vec::new()]);
    let load = load_average();
    let (raw_echo_addr, t0) = far_end(raw_echo)?;
    let (raw_sink_addr, t1) = far_end(raw_sink)?;
    let (frame_echo_addr, t2) = far_end(frame_echo)?;
    let (frame_sink_addr, t3) = far_end(frame_sink)?;
    let far = [
        raw_echo_addr,
        raw_sink_addr,
        frame_echo_addr,
        frame_sink_addr,
    ];
    eprintln!("carmi-bench: messaging (raw TCP, framing and two application echoes take turns)");
    // The measuring task runs on a worker thread, where the client library's
    // own tasks run, rather than on this thread (see `far_end`).
    let (local, secret) = (pool.locals[0].app_addr.clone(), pool.secret.clone());
    let task = rt.spawn(async move {
        tokio::time::timeout(PATIENCE, messaging(far, local, secret, echo_exe)).await
    });
    let samples = rt
        .block_on(task)?
        .map_err(|_| "the messaging benchmark timed out".to_string())?
        .map_err(|e| format!("{e}\n{}", pool.logs()))?;
    for t in [t0, t1, t2, t3] {
        t.join().map_err(|_| "a far-end thread panicked")??;
    }
    drop(pool);

    print_command("messaging");
    println!(
        "Loopback, Nagle off everywhere. Round trip: {SMALL}-byte messages, {WARMUP} untimed then {ROUND_TRIPS} timed \
         per layer. Bulk: 1 MiB messages, 1 GiB per layer and column. *One-way*: sender to receiver, the clock stopped \
         by the receiver's acknowledgement of the last message (the task echo drops these messages; `carmi-echo` \
         cannot). *Echoed*: every message comes back, at most {WINDOW} \
         in flight; the figure is per direction (1 GiB each way over the elapsed time). The layers take turns, \
         {TRIPS_PER_ROUND} round trips or {BULK_PER_ROUND} MiB at a time. The measuring side runs in a task; so does \
         the far end of the raw and framed rows (a thread with its own tokio runtime). The application rows' far end \
         is a process started with `class_spawn`: `carmi-echo`, whose loop runs on its main thread (in \
         `#[tokio::main]`'s `block_on`), or the same echo with its loop in a spawned task. Load average at the start: \
         {load}.\n"
    );
    println!(
        "| Layer | Round trip, median (µs) | Round trip, p99 (µs) | 1 MiB one-way (MiB/s) | 1 MiB echoed, per direction (MiB/s) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let names = [
        "raw TCP (tokio `TcpStream`)",
        "framing (`write_frame` / `FrameReader`, `PeerMessage` header)",
        "application `send` (bench → `carmi-echo` → bench)",
        "application `send`, echo loop in a task (bench → `carmi-bench echo-task` → bench)",
    ];
    let latency: Vec<Latency> = samples
        .iter()
        .map(|s| Latency::of(&s.round_trips))
        .collect();
    for ((name, s), l) in names.iter().zip(&samples).zip(&latency) {
        let one_way = if s.one_way.1 == 0 {
            "n/a (the echo returns every message)".to_string()
        } else {
            format!("{:.0}", mib_per_s(s.one_way))
        };
        println!(
            "| {name} | {} | {} | {one_way} | {:.0} |",
            micros(l.median),
            micros(l.p99),
            mib_per_s(s.echoed)
        );
    }
    println!();

    let raw = &samples[0];
    let yes = |ok: bool| if ok { "yes" } else { "**no**" };
    println!(
        "| Application vs raw TCP | with `carmi-echo` | with the echo loop in a task | Target | Met (`carmi-echo`) |"
    );
    println!("|---|---:|---:|---:|---|");
    let ratio = |f: &dyn Fn(usize) -> f64| (f(2) / f(0), f(3) / f(0));
    let (rtt, rtt_task) = ratio(&|i| latency[i].median.as_secs_f64());
    println!(
        "| round trip, median (application / raw) | {rtt:.2}x | {rtt_task:.2}x | at most 2x | {} |",
        yes(rtt <= 2.0)
    );
    let (p99, p99_task) = ratio(&|i| latency[i].p99.as_secs_f64());
    println!("| round trip, p99 (application / raw) | {p99:.2}x | {p99_task:.2}x | — | — |");
    let (bw, bw_task) = ratio(&|i| mib_per_s(samples[i].echoed));
    println!(
        "| 1 MiB echoed, per direction (application / raw) | {:.0}% | {:.0}% | at least 70% | {} |",
        bw * 100.0,
        bw_task * 100.0,
        yes(bw >= 0.7)
    );
    let one_way = mib_per_s(raw.one_way);
    println!(
        "| 1 MiB one-way (application / raw) | n/a | {:.0}% | — | — |",
        mib_per_s(samples[3].one_way) / one_way * 100.0
    );
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------
// Applications: an event stream that keeps what is not yet wanted
// ---------------------------------------------------------------------------

/// An application's event stream, keeping what arrives while waiting for
/// something else (RM events come in any order).
struct Inbox {
    events: EventStream,
    kept: VecDeque<Incoming>,
}

impl Inbox {
    fn new(events: EventStream) -> Inbox {
        Inbox {
            events,
            kept: VecDeque::new(),
        }
    }

    /// The first item `want` accepts, waiting at most `PATIENCE`.
    async fn take<T>(
        &mut self,
        what: &str,
        mut want: impl FnMut(&Incoming) -> Option<T>,
    ) -> Result<T> {
        if let Some(i) = self.kept.iter().position(|x| want(x).is_some()) {
            let item = self.kept.remove(i).expect("position is in range");
            return Ok(want(&item).expect("accepted a moment ago"));
        }
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match tokio::time::timeout_at(deadline, self.events.next()).await {
                Ok(Some(item)) => {
                    if let Some(t) = want(&item) {
                        return Ok(t);
                    }
                    // A failed request is never what anyone waits for: report it at once.
                    if let Incoming::Rm(Event::Failed { request, failure }) = &item {
                        return Err(format!(
                            "waiting for {what}: request {request} failed: {failure:?}"
                        )
                        .into());
                    }
                    self.kept.push_back(item);
                }
                Ok(None) => return Err(format!("event stream ended waiting for {what}").into()),
                Err(_) => return Err(format!("timed out waiting for {what}").into()),
            }
        }
    }

    /// The `Done` reply of `request`.
    async fn done(&mut self, request: RequestId) -> Result<Reply> {
        self.take(&format!("the reply to {request}"), |x| match x {
            Incoming::Rm(Event::Done { request: r, reply }) if *r == request => Some(reply.clone()),
            _ => None,
        })
        .await
    }

    /// Hosts delivered for an `addhosts` request, until there are `count`.
    async fn hosts(&mut self, request: RequestId, count: usize) -> Result<Vec<HostId>> {
        let mut hosts = Vec::new();
        while hosts.len() < count {
            let got = self
                .take(&format!("hosts for {request}"), |x| match x {
                    Incoming::Rm(Event::HostsAdded {
                        request: r, hosts, ..
                    }) if *r == request => Some(hosts.iter().map(|h| h.host).collect::<Vec<_>>()),
                    _ => None,
                })
                .await?;
            hosts.extend(got);
        }
        Ok(hosts)
    }
}

/// A new job with `count` hosts of class `any` (every machine).
async fn job_with_hosts(
    local: String,
    secret: Secret,
    count: usize,
) -> Result<(Carmi, Inbox, Vec<HostId>)> {
    let opts = ConnectOptions::new(local, secret);
    let (carmi, events) = connect(opts).await?;
    let mut inbox = Inbox::new(events);
    inbox.done(carmi.define_class("any", "true")).await?;
    let add = carmi.addhosts("any", count as u32, count as u32);
    let hosts = inbox.hosts(add, count).await?;
    Ok((carmi, inbox, hosts))
}

// ---------------------------------------------------------------------------
// Spawn
// ---------------------------------------------------------------------------

/// Timings of one run of `SPAWN_COUNT` spawns, from the first `class_spawn` call.
#[derive(Clone, Copy)]
struct SpawnRun {
    /// Until `flush` returned: every request, and the upload if there was
    /// one, handed to the socket to the local RM.
    written: Duration,
    first_started: Duration,
    all_started: Duration,
    all_exited: Duration,
}

/// Writes the filler script ([`carmi_tests::write_executable`]) and checks
/// that it runs and exits at once.
fn write_executable(path: &Path, size: usize, seed: u64) -> Result<()> {
    carmi_tests::write_executable(path, size, seed)?;
    // It must run, and quickly, or the runs would time the script, not CARMI.
    let t = Instant::now();
    let status = Command::new(path).status()?;
    if !status.success() || t.elapsed() > Duration::from_millis(200) {
        return Err(format!(
            "{} does not exit at once ({status}, {:?})",
            path.display(),
            t.elapsed()
        )
        .into());
    }
    Ok(())
}

/// Starts `SPAWN_COUNT` processes of `exe` on class `any` and times them
/// until all have exited (successfully).
async fn spawn_run(carmi: &Carmi, inbox: &mut Inbox, exe: &Path) -> Result<SpawnRun> {
    let t0 = Instant::now();
    let requests: Vec<RequestId> = (0..SPAWN_COUNT)
        .map(|_| carmi.class_spawn(exe, Vec::<String>::new(), SpawnTarget::Class("any".into())))
        .collect();
    // Flushing in a task of its own: events must be taken as they arrive.
    let flusher = carmi.clone();
    let flushed = tokio::spawn(async move {
        flusher.flush().await;
        Instant::now()
    });
    let mine: HashSet<RequestId> = requests.iter().copied().collect();
    let mut started = Vec::new();
    let mut exited = 0;
    while exited < SPAWN_COUNT {
        let what = format!("{} started, {exited} exited", started.len());
        let event = inbox
            .take(&what, |x| match x {
                Incoming::Rm(
                    e @ (Event::ProcessStarted { request, .. }
                    | Event::ProcessExited { request, .. }),
                ) if mine.contains(request) => Some(e.clone()),
                _ => None,
            })
            .await?;
        match event {
            Event::ProcessStarted { .. } => started.push(t0.elapsed()),
            Event::ProcessExited { status, .. } => {
                if status != ExitStatus::Code(0) {
                    return Err(format!("a spawned process ended with {status:?}").into());
                }
                exited += 1;
            }
            _ => unreachable!("only starts and exits are taken"),
        }
    }
    let all_exited = t0.elapsed();
    let written = flushed.await? - t0;
    if started.len() != SPAWN_COUNT {
        return Err(format!("{} exits but {} starts", SPAWN_COUNT, started.len()).into());
    }
    Ok(SpawnRun {
        written,
        first_started: started[0],
        all_started: started[SPAWN_COUNT - 1],
        all_exited,
    })
}

/// Gives a job's hosts back and closes its connection.
async fn release(carmi: Carmi, mut inbox: Inbox, hosts: &[HostId]) -> Result<()> {
    inbox.done(carmi.delhosts(hosts)).await?;
    carmi.flush().await;
    Ok(())
}

/// The three kinds of run, per repetition.
struct SpawnRep {
    /// Fresh executable: upload, distribution to every machine, execution.
    cold: SpawnRun,
    /// The same executable again on the same connection: nothing to transfer.
    warm: SpawnRun,
    /// The same executable from a new job: uploaded again (the client
    /// remembers uploads per connection) but in every machine's cache.
    reupload: SpawnRun,
}

async fn spawn_reps(pool: &Pool) -> Result<Vec<SpawnRep>> {
    let mut reps = Vec::new();
    let seed0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    for rep in 0..SPAWN_REPS {
        let exe = pool.dir.join(format!("padded-{rep}.sh"));
        write_executable(&exe, EXE_SIZE, seed0.wrapping_add(rep as u64 * 0x9e37_79b9))?;

        let (carmi, mut inbox, hosts) = job_with_hosts(
            pool.locals[0].app_addr.clone(),
            pool.secret.clone(),
            SPAWN_COUNT,
        )
        .await?;
        let cold = spawn_run(&carmi, &mut inbox, &exe).await?;
        let warm = spawn_run(&carmi, &mut inbox, &exe).await?;
        release(carmi, inbox, &hosts).await?;

        let (carmi, mut inbox, hosts) = job_with_hosts(
            pool.locals[0].app_addr.clone(),
            pool.secret.clone(),
            SPAWN_COUNT,
        )
        .await?;
        let reupload = spawn_run(&carmi, &mut inbox, &exe).await?;
        release(carmi, inbox, &hosts).await?;
        reps.push(SpawnRep {
            cold,
            warm,
            reupload,
        });
    }
    Ok(reps)
}

/// Median, minimum and maximum of one timing over the repetitions, in ms.
fn spread(reps: &[SpawnRep], pick: impl Fn(&SpawnRep) -> Duration) -> (Duration, String) {
    let mut v: Vec<Duration> = reps.iter().map(pick).collect();
    v.sort();
    let median = v[v.len() / 2];
    let text = format!(
        "{} ({}–{})",
        millis(median),
        millis(v[0]),
        millis(v[v.len() - 1])
    );
    (median, text)
}

fn run_spawn(rt: &tokio::runtime::Runtime) -> Result<()> {
    let machines = vec![Vec::new(); SPAWN_MACHINES];
    let pool = Pool::start("bench-spawn", SPAWN_SLOTS, &machines);
    let load = load_average();
    eprintln!("carmi-bench: spawn");
    let reps = rt
        .block_on(spawn_reps(&pool))
        .map_err(|e| format!("{e}\n{}", pool.logs()))?;
    drop(pool);

    print_command("spawn");
    println!(
        "{SPAWN_COUNT} `class_spawn` requests of one {} MiB executable (a shell script that exits at once) on \
         {SPAWN_MACHINES} local RMs x {SPAWN_SLOTS} slots, all on this host; times from the first `class_spawn` \
         call until the application sees the events. Median of {SPAWN_REPS} repetitions (min–max), each with a \
         fresh executable. *Cold*: cached nowhere. *Re-uploaded*: a new job sends it again; every machine has it \
         cached. *Warm*: the same job spawns it again; nothing is transferred. *Written* is when `flush` returned: \
         the requests and the upload handed to the socket to the local RM. Execution includes each local RM copying \
         the executable from its cache into the process's sandbox. Load average at the start: {}.\n",
        EXE_SIZE >> 20,
        load
    );
    println!(
        "| Run | Written (ms) | First started (ms) | All {SPAWN_COUNT} started (ms) | All {SPAWN_COUNT} exited (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    type Pick = fn(&SpawnRep) -> SpawnRun;
    let kinds: [(&str, Pick); 3] = [
        ("cold (upload + distribution + execution)", |r| r.cold),
        ("re-uploaded (upload + execution)", |r| r.reupload),
        ("warm (execution only)", |r| r.warm),
    ];
    for (name, pick) in kinds {
        println!(
            "| {name} | {} | {} | {} | {} |",
            spread(&reps, |r| pick(r).written).1,
            spread(&reps, |r| pick(r).first_started).1,
            spread(&reps, |r| pick(r).all_started).1,
            spread(&reps, |r| pick(r).all_exited).1,
        );
    }
    println!();

    // Differences per repetition, then their median: the runs of one
    // repetition share a pool state, so their difference is the fairer one.
    let diff = |a: Duration, b: Duration| a.saturating_sub(b);
    let (cold_total, _) = spread(&reps, |r| r.cold.all_exited);
    println!("| Component (to all {SPAWN_COUNT} exited) | Time (ms) | Derived as |");
    println!("|---|---:|---|");
    println!(
        "| staging | {} | cold − warm |",
        spread(&reps, |r| diff(r.cold.all_exited, r.warm.all_exited)).1
    );
    println!(
        "| — upload: application → local RM → global RM | {} | re-uploaded − warm |",
        spread(&reps, |r| diff(r.reupload.all_exited, r.warm.all_exited)).1
    );
    println!(
        "| — distribution: global RM → {SPAWN_MACHINES} machine caches | {} | cold − re-uploaded |",
        spread(&reps, |r| diff(r.cold.all_exited, r.reupload.all_exited)).1
    );
    println!(
        "| execution: sandbox, start, exit, report | {} | warm |",
        spread(&reps, |r| r.warm.all_exited).1
    );
    println!(
        "| total, cold | {} | target under 1000: {} |",
        spread(&reps, |r| r.cold.all_exited).1,
        if cold_total < Duration::from_secs(1) {
            "met"
        } else {
            "**not met**"
        }
    );
    println!();
    Ok(())
}
