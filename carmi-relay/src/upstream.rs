//! The relay's link to the global RM: connect and prove itself as
//! `Role::Relay` (with its admin token), have its key certified, then pass
//! the machines' channels both ways and fold their heartbeats, until the
//! link ends; then every machine's connection is closed and the link made
//! again after a backoff (100 ms doubling to 5 s, with jitter), to the next
//! manager of the list (`--global a,b`: standby managers, of which one is
//! active and the others refuse).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use carmi_api::conn::{Conn, ConnReader};
use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Towards};
use carmi_api::msg::Role;
use carmi_api::msg::relay::{MAX_ALIVE_CHANS, RelayDown, RelayUp};
use carmi_api::tls;
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::RelayConfig;
use crate::hub::{Down, Hub};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const FIRST_DELAY: Duration = Duration::from_millis(100);
const LONGEST_DELAY: Duration = Duration::from_secs(5);
/// How often the relay sums up its traffic (at debug level).
const SUMMARY_PERIOD: Duration = Duration::from_secs(5);

/// One debug line: machines, heartbeats folded and frames passed since the last.
fn summarize(hub: &Hub) {
    use std::sync::atomic::Ordering::Relaxed;
    let (folded, passed) = (hub.folded.swap(0, Relaxed), hub.passed.swap(0, Relaxed));
    tracing::debug!(
        machines = hub.sessions(),
        "relay summary: {folded} unchanged heartbeats folded, {passed} frames passed on"
    );
}

/// Keeps a link to the global RM until `stop`.
pub(crate) async fn run(config: RelayConfig, hub: Arc<Hub>, mut stop: watch::Receiver<bool>) {
    let managers: Vec<String> = (config.global.split(','))
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let mut delay = FIRST_DELAY;
    for global in managers.iter().cycle() {
        let connected = tokio::select! {
            c = connect(global, &config) => c,
            _ = stop.changed() => return,
        };
        match connected {
            Ok(conn) => {
                info!(%global, "relay linked to the global RM");
                delay = FIRST_DELAY;
                let why = tokio::select! {
                    why = serve(conn, &config, &hub) => why,
                    _ = stop.changed() => return,
                };
                warn!(%global, "relay link to the global RM ended: {why}; its machines' connections are closed");
                hub.lose_upstream(&why);
            }
            Err(e) => warn!(%global, "relay cannot link to the global RM: {e}"),
        }
        let jitter = rand::rng().random_range(0.5..1.0);
        tokio::select! {
            _ = tokio::time::sleep(delay.mul_f64(jitter)) => {}
            _ = stop.changed() => return,
        }
        delay = (delay * 2).min(LONGEST_DELAY);
    }
}

type UpConn = Conn<RelayUp, RelayDown>;

async fn connect(global: &str, config: &RelayConfig) -> Result<UpConn, String> {
    let stream = carmi_api::net::dial(global, CONNECT_TIMEOUT)
        .await
        .map_err(|e| format!("cannot connect to {global}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let tls::Stream {
        reader,
        mut writer,
        binding,
    } = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, tls::connect(stream))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let mut reader = FrameReader::new(reader);
    let role = Role::Relay {
        name: config.name.clone(),
    };
    handshake::client_towards(
        &mut reader,
        &mut writer,
        &config.secret,
        &role,
        &binding,
        Towards::Global,
    )
    .await
    .map_err(|e| format!("handshake failed: {e}"))?;
    Ok(Conn::from_parts(reader, writer))
}

/// One link, until it ends: why.
async fn serve(conn: UpConn, config: &RelayConfig, hub: &Hub) -> String {
    let (mut reader, mut writer) = conn.split();
    let (up_tx, mut up_rx) = mpsc::channel(config.max_queued.max(1));
    if let Some(prover) = &hub.prover {
        let key = prover.public().to_text();
        let _ = up_tx.try_send((RelayUp::Certify { key }, Bytes::new()));
    }
    hub.linked_by(up_tx.clone());
    let ended = tokio::select! {
        r = read(&mut reader, hub) => r,
        r = writer.send_queued(&mut up_rx) => {
            r.map_err(|e| format!("cannot write to the global RM: {e}"))
        }
        r = fold_heartbeats(config.alive, hub, &up_tx) => r,
    };
    let _ = writer.shutdown().await;
    match ended {
        Ok(()) => "the global RM closed it".into(),
        Err(e) => e,
    }
}

/// What the global RM says, to the machines and admissions it concerns.
async fn read(reader: &mut ConnReader<RelayDown>, hub: &Hub) -> Result<(), String> {
    loop {
        let (msg, payload) = match reader.recv().await {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("bad frame from the global RM: {e}")),
        };
        match msg {
            RelayDown::Data { chan } => {
                if let Some(why) = hub.to_machine(chan, Down::Data(payload)) {
                    warn!(chan, "closing a machine's connection: {why}");
                }
            }
            RelayDown::Close { chan, reason } => {
                hub.to_machine(chan, Down::Close(reason));
            }
            RelayDown::Admitted { chan, result } => hub.admitted(chan, result),
            RelayDown::Certified { cert: Ok(cert) } => {
                if let Some(p) = &hub.prover {
                    info!("the global RM certified this relay's key");
                    p.certified(cert);
                }
            }
            RelayDown::Certified { cert: Err(e) } => {
                warn!(
                    "the global RM did not certify this relay's key: {e}; machines with tokens will not trust it"
                );
            }
        }
    }
}

/// Every `period`, one `Alive` naming the machines that sent an unchanged
/// heartbeat since the last.
async fn fold_heartbeats(
    period: Duration,
    hub: &Hub,
    up: &mpsc::Sender<(RelayUp, Bytes)>,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_summary = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        if last_summary.elapsed() >= SUMMARY_PERIOD {
            last_summary = tokio::time::Instant::now();
            summarize(hub);
        }
        let alive = hub.take_alive();
        for chans in alive.chunks(MAX_ALIVE_CHANS) {
            let msg = RelayUp::Alive {
                chans: chans.to_vec(),
            };
            up.send((msg, Bytes::new()))
                .await
                .map_err(|_| "the link is closing".to_string())?;
        }
    }
}
