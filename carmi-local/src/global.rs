//! The connection to the global RM: connect, handshake as `Role::Local`,
//! relay frames both ways, and on any failure reconnect with exponential
//! backoff (100 ms doubling to 5 s, with jitter so that a pool of local RMs
//! does not reconnect in lockstep after the global RM restarts).
//!
//! Each session tells the driver `GlobalUp` with a sender for outgoing
//! messages, and `GlobalDown` with the receiver, so that the driver can take
//! back whatever was queued but never written.

use std::time::Duration;

use bytes::Bytes;
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};

use crate::daemon::{Input, stopped};

/// First reconnection delay.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest reconnection delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long queued messages may take to go out when the daemon stops.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Exponential backoff with jitter.
#[derive(Clone, Debug)]
pub struct Backoff {
    current: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            current: BACKOFF_MIN,
        }
    }
}

impl Backoff {
    /// The next delay: between half and all of the current step, which then doubles up to the maximum.
    pub fn next_delay(&mut self) -> Duration {
        let factor = rand::random_range(0.5..=1.0);
        let delay = self.current.mul_f64(factor);
        self.current = (self.current * 2).min(BACKOFF_MAX);
        delay
    }

    /// Back to the first step (after a connection that worked).
    pub fn reset(&mut self) {
        self.current = BACKOFF_MIN;
    }
}

/// Where and who to connect as.
#[derive(Clone, Debug)]
pub(crate) struct GlobalConfig {
    pub addr: String,
    pub secret: Secret,
    pub name: String,
}

/// Keeps a connection to the global RM until `stop` turns true.
pub(crate) async fn run(
    cfg: GlobalConfig,
    inputs: mpsc::Sender<Input>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    loop {
        if *stop.borrow() {
            break;
        }
        let connected = tokio::select! {
            c = connect(&cfg) => c,
            _ = stopped(&mut stop) => break,
        };
        match connected {
            Ok((reader, writer)) => {
                tracing::info!(global = %cfg.addr, "connected to the global RM");
                if session(reader, writer, &inputs, &mut stop).await {
                    backoff.reset();
                }
            }
            Err(e) => {
                tracing::warn!(global = %cfg.addr, error = %e, "cannot connect to the global RM")
            }
        }
        if *stop.borrow() {
            break;
        }
        let delay = backoff.next_delay();
        tracing::info!(global = %cfg.addr, delay_ms = delay.as_millis() as u64, "reconnecting to the global RM");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut stop) => break,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection timed out")]
    Timeout,
    #[error("handshake: {0}")]
    Handshake(#[from] handshake::HandshakeError),
}

async fn connect(
    cfg: &GlobalConfig,
) -> Result<(FrameReader<OwnedReadHalf>, OwnedWriteHalf), ConnectError> {
    let stream = carmi_api::net::dial(&cfg.addr, CONNECT_TIMEOUT)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            _ => e.into(),
        })?;
    let (r, mut w) = stream.into_split();
    let mut reader = FrameReader::new(r);
    let role = Role::Local {
        name: cfg.name.clone(),
    };
    handshake::client(&mut reader, &mut w, &cfg.secret, &role).await?;
    Ok((reader, w))
}

/// Relays one connection; true if it got as far as `Registered`.
async fn session(
    mut reader: FrameReader<OwnedReadHalf>,
    mut w: OwnedWriteHalf,
    inputs: &mpsc::Sender<Input>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let (tx, mut rx) = mpsc::unbounded_channel::<(ToGlobal, Bytes)>();
    let local_ip = w.local_addr().ok().map(|a| a.ip());
    if inputs.send(Input::GlobalUp { tx, local_ip }).await.is_err() {
        return false;
    }
    let mut registered = false;
    let mut failed = None;
    loop {
        // FrameReader::read keeps partial frames in its buffer, so losing this
        // race to an outgoing message loses no bytes.
        tokio::select! {
            frame = reader.read::<FromGlobal>() => match frame {
                Ok(Some((msg, payload))) => {
                    if matches!(msg, FromGlobal::Registered { .. }) {
                        registered = true;
                    }
                    if inputs.send(Input::Global(msg, payload)).await.is_err() {
                        break;
                    }
                }
                Ok(None) => {
                    tracing::warn!("the global RM closed the connection");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "bad frame from the global RM; dropping the connection");
                    break;
                }
            },
            out = rx.recv() => match out {
                Some((msg, payload)) => {
                    if let Err(e) = write_frame(&mut w, &msg, &payload).await {
                        tracing::warn!(error = %e, "cannot write to the global RM; dropping the connection");
                        failed = Some((msg, payload));
                        break;
                    }
                }
                None => break,
            },
            _ = stopped(stop) => {
                // Last words (exits of the processes killed at shutdown), briefly.
                let flush = async {
                    while let Ok((msg, payload)) = rx.try_recv() {
                        write_frame(&mut w, &msg, &payload).await?;
                    }
                    std::io::Result::Ok(())
                };
                if let Ok(Err(e)) = tokio::time::timeout(FLUSH_TIMEOUT, flush).await {
                    tracing::warn!(error = %e, "cannot flush messages to the global RM at shutdown");
                }
                break;
            }
        }
    }
    let _ = inputs.send(Input::GlobalDown { failed, rest: rx }).await;
    registered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::default();
        let mut step = BACKOFF_MIN;
        for _ in 0..12 {
            let d = b.next_delay();
            assert!(d >= step / 2 && d <= step, "{d:?} for step {step:?}");
            step = (step * 2).min(BACKOFF_MAX);
        }
        assert_eq!(step, BACKOFF_MAX);
        b.reset();
        assert!(b.next_delay() <= BACKOFF_MIN);
    }
}
