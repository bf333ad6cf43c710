//! The `messaging` benchmark: the far ends of raw TCP and of CARMI's
//! framing, the measuring end of every layer, and the run that prints the
//! latency and throughput tables.

use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;
use carmi_api::client::{Carmi, EventStream, Incoming};
use carmi_api::conn::{Conn, ConnReader, ConnWriter};
use carmi_api::handshake::Secret;
use carmi_api::ids::{ProcessId, RequestId};
use carmi_api::msg::{Event, PeerMessage, SpawnTarget};
use carmi_testkit::Pool;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use carmi_testkit::Inbox;

use super::inbox::{bench_inbox, job_with_hosts_plain};
use super::{
    BULK, BULK_COUNT, ECHO_TASK, Latency, PATIENCE, ROUND_TRIPS, Result, SMALL, Samples, TAG_BULK,
    TAG_ONE_WAY, TAG_PING, TAG_SYNC, WARMUP, WINDOW, load_average, mib_per_s, micros,
    print_command,
};

/// Serves one connection with `serve` on a thread of its own with its own
/// multi-threaded runtime, standing in for a separate process.
pub(super) fn far_end<F, Fut>(serve: F) -> Result<(SocketAddr, std::thread::JoinHandle<Result<()>>)>
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
pub(super) async fn dial(addr: SocketAddr) -> Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Raw far end: writes back every byte it reads, as it reads it.
pub(super) async fn raw_echo(mut s: TcpStream) -> Result<()> {
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
pub(super) async fn raw_sink(mut s: TcpStream) -> Result<()> {
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

/// One framed connection: a typed [`Conn`] of peer messages split into its
/// reading half and a buffered writing half, as the client library's peer
/// connections have.
pub(super) struct Framed {
    r: ConnReader<PeerMessage, tokio::net::tcp::OwnedReadHalf>,
    w: ConnWriter<PeerMessage, BufWriter<tokio::net::tcp::OwnedWriteHalf>>,
}

impl Framed {
    pub(super) fn new(s: TcpStream) -> Framed {
        let (r, w) = s.into_split();
        let (r, w) = Conn::new(r, BufWriter::with_capacity(64 * 1024, w)).split();
        Framed { r, w }
    }
}

/// Writes one framed message and hands it to the socket, as the client's peer writer does.
pub(super) async fn send_frame<W: AsyncWrite + Unpin>(
    w: &mut ConnWriter<PeerMessage, W>,
    tag: u32,
    body: &[u8],
) -> Result<()> {
    w.send(&PeerMessage { tag }, body).await?;
    w.flush().await?;
    Ok(())
}

/// The next framed message, or an error if the connection ends.
pub(super) async fn recv_frame<R: AsyncRead + Unpin>(
    r: &mut ConnReader<PeerMessage, R>,
) -> Result<(u32, Bytes)> {
    match r.recv().await? {
        Some((PeerMessage { tag }, body)) => Ok((tag, body)),
        None => Err("the framed connection closed early".into()),
    }
}

/// Framed far end: answers every message with the same body and tag + 1, like `carmi-echo`.
pub(super) async fn frame_echo(s: TcpStream) -> Result<()> {
    let mut f = Framed::new(s);
    while let Some((PeerMessage { tag }, body)) = f.r.recv().await? {
        send_frame(&mut f.w, tag + 1, &body).await?;
    }
    Ok(())
}

/// Framed far end for one-way runs: drops messages, answers `TAG_SYNC` with tag + 1.
pub(super) async fn frame_sink(s: TcpStream) -> Result<()> {
    let mut f = Framed::new(s);
    while let Some((PeerMessage { tag }, _)) = f.r.recv().await? {
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
// Six of them live for the whole run: their size does not matter, and a
// box would put one more pointer hop on the path being measured.
#[allow(clippy::large_enum_variant)]
pub(super) enum Layer {
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
    pub(super) async fn round_trip(&mut self) -> Result<()> {
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
    pub(super) async fn one_way(&mut self, count: usize, body: &Bytes) -> Result<bool> {
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
    pub(super) async fn echoed(&mut self, count: usize, body: &Bytes) -> Result<()> {
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
pub(super) async fn reply(events: &mut EventStream, from: ProcessId, tag: u32) -> Result<Bytes> {
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
/// `args`) on its one host and waits until the echo answers; with `plain`,
/// both ends' direct connections are in clear, else TLS.
pub(super) async fn start_echo(
    (local, secret): (String, Secret),
    echo_exe: &Path,
    args: &[&str],
    plain: bool,
) -> Result<(Carmi, Inbox, ProcessId, RequestId)> {
    let (carmi, mut inbox, hosts) = job_with_hosts_plain(local, secret, 1, plain).await?;
    let plain_arg = plain.then_some("plain");
    let args = args.iter().chain(&plain_arg).map(|a| a.to_string());
    let spawn = carmi.class_spawn(echo_exe, args, SpawnTarget::Host(hosts[0]));
    let echo = inbox
        .try_take("the echo to start", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(*process),
            _ => None,
        })
        .await?;
    // The first message waits (in the RM's lookup) until the echo has attached.
    carmi.send(echo, TAG_PING, Bytes::from_static(b"hello"));
    reply(inbox.events(), echo, TAG_PING + 1).await?;
    Ok((carmi, inbox, echo, spawn))
}

/// Round trips timed per layer in each latency round, and bulk messages per
/// layer and kind in each bulk round: the layers take turns, so that all of
/// them see the same conditions on a machine whose load varies.
pub(super) const TRIPS_PER_ROUND: usize = 1_000;
pub(super) const BULK_PER_ROUND: usize = 128;

/// Measures every layer, the layers taking turns round by round.
pub(super) async fn measure_layers(layers: &mut [Layer], samples: &mut [Samples]) -> Result<()> {
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
pub(super) async fn messaging(
    far: [SocketAddr; 4],
    local: String,
    secret: Secret,
    echo_exe: PathBuf,
) -> Result<Vec<Samples>> {
    let ourselves = std::env::current_exe()?;
    // carmi-echo and the task echo, each in clear and over TLS.
    let mut echoes = Vec::new();
    for (exe, args, sink) in [
        (&echo_exe, &[][..], false),
        (&ourselves, &[ECHO_TASK][..], true),
    ] {
        for plain in [true, false] {
            let to = (local.clone(), secret.clone());
            let (carmi, inbox, echo, spawn) = start_echo(to, exe, args, plain).await?;
            echoes.push((carmi, inbox, echo, spawn, sink));
        }
    }
    let mut layers = vec![
        Layer::Raw {
            echo: dial(far[0]).await?,
            sink: dial(far[1]).await?,
        },
        Layer::Framed {
            echo: Framed::new(dial(far[2]).await?),
            sink: Framed::new(dial(far[3]).await?),
        },
    ];
    let mut ends = Vec::new();
    for (carmi, inbox, echo, spawn, sink) in echoes {
        // Nothing that is kept for later is needed after this point.
        layers.push(Layer::App {
            carmi: carmi.clone(),
            events: inbox.into_events(),
            echo,
            sink,
        });
        ends.push((carmi, echo, spawn));
    }
    let mut samples: Vec<Samples> = layers.iter().map(|_| Samples::default()).collect();
    measure_layers(&mut layers, &mut samples).await?;

    // Closing the raw and framed connections ends their far ends; tag 0 ends an echo.
    let mut streams = layers.into_iter().filter_map(|l| match l {
        Layer::App { events, .. } => Some(events),
        _ => None,
    });
    for (carmi, echo, spawn) in ends {
        let events = streams.next().expect("one event stream per echo");
        let mut inbox = bench_inbox(events);
        carmi.send(echo, 0, Bytes::new());
        carmi.flush().await;
        inbox
            .try_take("an echo to exit", |x| match x {
                Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
                _ => None,
            })
            .await?;
    }
    Ok(samples)
}

/// Builds `carmi-echo` with this program's profile (`cargo run --bin
/// carmi-bench` builds only the benchmark) and returns its path, next to ours.
pub(super) fn build_echo() -> Result<PathBuf> {
    let mut cmd = carmi_testkit::cargo_build(&["-p", "carmi-tests", "--bin", "carmi-echo"]);
    if !cmd.status()?.success() {
        return Err("building carmi-echo failed".into());
    }
    let path = std::env::current_exe()?.with_file_name("carmi-echo");
    if !path.exists() {
        return Err(format!("carmi-echo was built, but not at {}", path.display()).into());
    }
    Ok(path)
}

pub(super) fn run_messaging(rt: &tokio::runtime::Runtime) -> Result<()> {
    let echo_exe = build_echo()?;
    // One slot per echo: each runs in a job of its own.
    let pool = Pool::start("bench-messaging", 4, &[Vec::new()]);
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
         is a process started with `class_spawn`: `carmi-echo`, or `carmi-bench echo-task`, which also drops one-way \
         messages; each in clear (`plain_peers` on both ends) and over TLS 1.3 (the default). Load average at the \
         start: {load}.\n"
    );
    println!(
        "| Layer | Round trip, median (µs) | Round trip, p99 (µs) | 1 MiB one-way (MiB/s) | 1 MiB echoed, per direction (MiB/s) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let names = [
        "raw TCP (tokio `TcpStream`)",
        "framing (`conn::Conn`, `PeerMessage` header)",
        "application `send`, plain (bench → `carmi-echo` → bench)",
        "application `send`, TLS (bench → `carmi-echo` → bench)",
        "application `send`, plain (bench → `carmi-bench echo-task` → bench)",
        "application `send`, TLS (bench → `carmi-bench echo-task` → bench)",
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
    print_ratios(&samples, &latency);
    Ok(())
}

/// The application rows against raw TCP, in clear and over TLS.
fn print_ratios(samples: &[Samples], latency: &[Latency]) {
    let yes = |ok: bool| if ok { "yes" } else { "**no**" };
    println!(
        "| Application (`carmi-echo`) vs raw TCP | plain | TLS | Target (plain) | Met (plain) |"
    );
    println!("|---|---:|---:|---:|---|");
    let ratio = |f: &dyn Fn(usize) -> f64| (f(2) / f(0), f(3) / f(0));
    let (rtt, rtt_tls) = ratio(&|i| latency[i].median.as_secs_f64());
    println!(
        "| round trip, median (application / raw) | {rtt:.2}x | {rtt_tls:.2}x | at most 2x | {} |",
        yes(rtt <= 2.0)
    );
    let (p99, p99_tls) = ratio(&|i| latency[i].p99.as_secs_f64());
    println!("| round trip, p99 (application / raw) | {p99:.2}x | {p99_tls:.2}x | — | — |");
    let (bw, bw_tls) = ratio(&|i| mib_per_s(samples[i].echoed));
    println!(
        "| 1 MiB echoed, per direction (application / raw) | {:.0}% | {:.0}% | at least 70% | {} |",
        bw * 100.0,
        bw_tls * 100.0,
        yes(bw >= 0.7)
    );
    let one_way = mib_per_s(samples[0].one_way);
    println!(
        "| 1 MiB one-way, task echo (application / raw) | {:.0}% | {:.0}% | — | — |",
        mib_per_s(samples[4].one_way) / one_way * 100.0,
        mib_per_s(samples[5].one_way) / one_way * 100.0
    );
    println!();
}
