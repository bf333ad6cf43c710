//! The worker library: register handlers, call [`Worker::run`].
//!
//! A worker is started by the server with a `--wodi-connect=ADDR,TOKEN,ID`
//! argument; [`Worker::run`] finds it, connects, and then serves the server's
//! messages one at a time with blocking I/O (a worker computes one step at a
//! time, so a runtime would only add latency). Results are written when no
//! further step is already waiting, so prefetched steps are answered in
//! batches; and before the last step in hand is computed, so that no result
//! waits behind it. CPU time is measured around each step: the process's own CPU
//! time plus that of children waited for during the step.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use carmi_api::frame::{decode, encode_header};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ids::{CycleId, StepId, WorkerId};
use crate::proto::{
    CONNECT_ARG, FromWorker, Hello, HelloRole, MAX_FRAME, ToWorker, WODI_PROTOCOL,
    parse_connect_arg,
};

type InitFn = Box<dyn FnMut(&[u8]) -> Result<(), String>>;
type CycleFn = Box<dyn FnMut(CycleId, &[u8]) -> Result<(), String>>;
type StepFn = Box<dyn FnMut(StepId, &[u8]) -> Result<Vec<u8>, String>>;

/// A worker's handlers. Unset handlers ignore their message (the step
/// handler echoes the step's data back).
pub struct Worker {
    init: InitFn,
    begin: CycleFn,
    step: StepFn,
    end: CycleFn,
}

impl Default for Worker {
    fn default() -> Worker {
        Worker::new()
    }
}

/// True if this process was started by a WoDi server as a worker (its
/// arguments hold `--wodi-connect=`).
pub fn started_as_worker() -> bool {
    std::env::args().any(|a| a.starts_with(CONNECT_ARG))
}

impl Worker {
    /// A worker with default handlers.
    pub fn new() -> Worker {
        Worker {
            init: Box::new(|_| Ok(())),
            begin: Box::new(|_, _| Ok(())),
            step: Box::new(|_, d| Ok(d.to_vec())),
            end: Box::new(|_, _| Ok(())),
        }
    }

    /// Handles the master's init data as raw bytes.
    pub fn on_init_raw(mut self, f: impl FnMut(&[u8]) -> Result<(), String> + 'static) -> Self {
        self.init = Box::new(f);
        self
    }

    /// Handles the master's init data, decoded from JSON into `T`.
    pub fn on_init<T: DeserializeOwned>(mut self, mut f: impl FnMut(T) + 'static) -> Self {
        self.init = Box::new(move |d| {
            f(serde_json::from_slice(d).map_err(|e| format!("init data: {e}"))?);
            Ok(())
        });
        self
    }

    /// Handles a cycle's begin data, decoded from JSON into `T`.
    pub fn on_begin_cycle<T: DeserializeOwned>(
        mut self,
        mut f: impl FnMut(CycleId, T) + 'static,
    ) -> Self {
        self.begin = Box::new(move |c, d| {
            f(
                c,
                serde_json::from_slice(d).map_err(|e| format!("cycle data: {e}"))?,
            );
            Ok(())
        });
        self
    }

    /// Handles a cycle's begin data as raw bytes.
    pub fn on_begin_cycle_raw(
        mut self,
        f: impl FnMut(CycleId, &[u8]) -> Result<(), String> + 'static,
    ) -> Self {
        self.begin = Box::new(f);
        self
    }

    /// Handles a cycle's end data, decoded from JSON into `T`.
    pub fn on_end_cycle<T: DeserializeOwned>(
        mut self,
        mut f: impl FnMut(CycleId, T) + 'static,
    ) -> Self {
        self.end = Box::new(move |c, d| {
            f(
                c,
                serde_json::from_slice(d).map_err(|e| format!("cycle end data: {e}"))?,
            );
            Ok(())
        });
        self
    }

    /// Computes steps with typed data and results (JSON on the wire). An
    /// `Err` fails the step at once (it is not retried).
    pub fn on_step<T: DeserializeOwned, R: Serialize>(
        mut self,
        mut f: impl FnMut(StepId, T) -> Result<R, String> + 'static,
    ) -> Self {
        self.step = Box::new(move |s, d| {
            let input = serde_json::from_slice(d).map_err(|e| format!("step data: {e}"))?;
            let out = f(s, input)?;
            serde_json::to_vec(&out).map_err(|e| format!("step result: {e}"))
        });
        self
    }

    /// Computes steps from their input alone, with a handler that may
    /// return any error type (its message, `{:#}`, fails the step). This is
    /// what [`crate::serve`] runs.
    pub fn on_input<T: DeserializeOwned, R: Serialize, E: std::fmt::Display>(
        self,
        mut f: impl FnMut(T) -> Result<R, E> + 'static,
    ) -> Self {
        self.on_step(move |_, input| f(input).map_err(|e| format!("{e:#}")))
    }

    /// Computes steps on raw bytes.
    pub fn on_step_raw(
        mut self,
        f: impl FnMut(StepId, &[u8]) -> Result<Vec<u8>, String> + 'static,
    ) -> Self {
        self.step = Box::new(f);
        self
    }

    /// Connects to the server named in this process's arguments and serves
    /// it until it says stop or the connection closes.
    pub fn run(self) -> anyhow::Result<()> {
        let arg = std::env::args()
            .find_map(|a| a.strip_prefix(CONNECT_ARG).map(str::to_string))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no {CONNECT_ARG} argument: this worker must be started by a WoDi server"
                )
            })?;
        let (addr, token, worker) = parse_connect_arg(&arg)
            .ok_or_else(|| anyhow::anyhow!("malformed argument {CONNECT_ARG}{arg}"))?;
        self.serve(&addr, &token, worker)
    }

    /// Serves the server at `addr` as `worker`.
    pub fn serve(mut self, addr: &str, token: &str, worker: WorkerId) -> anyhow::Result<()> {
        let mut stream = TcpStream::connect(addr)
            .map_err(|e| anyhow::anyhow!("cannot reach the WoDi server at {addr}: {e}"))?;
        stream.set_nodelay(true)?;
        let hello = Hello {
            version: WODI_PROTOCOL,
            token: token.to_string(),
            role: HelloRole::Worker { worker },
        };
        stream.write_all(&encode_header(&hello, 0))?;
        let mut inbuf = BytesMut::with_capacity(64 * 1024);
        let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
        loop {
            let (msg, payload) = match decode::<ToWorker>(&mut inbuf, MAX_FRAME)? {
                Some(frame) => frame,
                None => {
                    // Nothing complete is waiting: send what is ready, then block.
                    if !out.is_empty() {
                        stream.write_all(&out)?;
                        out.clear();
                    }
                    if !read_more(&mut stream, &mut inbuf)? {
                        return Ok(());
                    }
                    continue;
                }
            };
            match msg {
                ToWorker::Init => (self.init)(&payload).map_err(anyhow::Error::msg)?,
                ToWorker::BeginCycle { cycle } => {
                    (self.begin)(cycle, &payload).map_err(anyhow::Error::msg)?
                }
                ToWorker::EndCycle { cycle } => {
                    (self.end)(cycle, &payload).map_err(anyhow::Error::msg)?
                }
                ToWorker::Stop => {
                    stream.write_all(&out)?;
                    return Ok(());
                }
                ToWorker::Step { ticket, step } => {
                    // The last step in hand: send the results held so far
                    // before computing it, so that a result never waits on
                    // a step that may itself wait for the master to see it
                    // (and a long last step delays no one).
                    if inbuf.is_empty() && !out.is_empty() {
                        stream.write_all(&out)?;
                        out.clear();
                    }
                    let cpu0 = cpu_now();
                    let t0 = Instant::now();
                    let answer = (self.step)(step, &payload);
                    let wall_us = t0.elapsed().as_micros() as u64;
                    let cpu_us = cpu_now().saturating_sub(cpu0);
                    let (msg, body) = match answer {
                        Ok(r) => (
                            FromWorker::Result {
                                ticket,
                                cpu_us,
                                wall_us,
                            },
                            Bytes::from(r),
                        ),
                        Err(message) => (FromWorker::Error { ticket, message }, Bytes::new()),
                    };
                    out.extend_from_slice(&encode_header(&msg, body.len()));
                    if body.len() > 32 * 1024 {
                        stream.write_all(&out)?;
                        out.clear();
                        stream.write_all(&body)?;
                    } else {
                        out.extend_from_slice(&body);
                    }
                }
            }
        }
    }
}

/// Reads what the socket has into `buf`; false at end of stream.
fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<bool> {
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    let len = buf.len();
    let cap = buf.capacity();
    buf.resize(cap, 0);
    match stream.read(&mut buf[len..]) {
        Ok(n) => {
            buf.truncate(len + n);
            Ok(n > 0)
        }
        Err(e) => {
            buf.truncate(len);
            Err(e)
        }
    }
}

/// CPU time used so far by this process and its waited-for children, microseconds.
pub fn cpu_now() -> u64 {
    let mut total = 0u64;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage writes a plain struct that we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut ru) } == 0 {
            for tv in [ru.ru_utime, ru.ru_stime] {
                total += tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
            }
        }
    }
    total
}
