//! `carmi-relay`: a daemon that machines' local RMs connect to as if it were
//! the global RM, and that carries all their links to the global RM over
//! one authenticated connection of its own (issue 36), as HTCondor's child
//! collectors stand between a large pool's machines and its top collector.
//!
//! - **To its machines** it is the global RM: it serves TLS and the pool's
//!   handshake, proving itself with a relay certificate the global RM signed
//!   with the pool's key (`carmi_api::machinecert::issue_relay`), so a local
//!   RM shows it its daemon token's proof only once the relay is proven.
//!   Whether the token admits the machine is the global RM's to say (it
//!   knows the revocations): the relay asks, and refuses the machine with
//!   the global RM's reason.
//! - **To the global RM** it is one link (`Role::Relay`, an admin's token),
//!   over which each admitted machine's bytes travel on a channel of their
//!   own (`carmi_api::msg::relay`); the global RM serves each channel as a
//!   machine's own connection, so the router sees every machine as before.
//! - **Heartbeats** that change nothing are not passed on one by one: the
//!   relay names the machines that sent one in a single `Alive` per period.
//! - **Losing it** looks to its machines like a restart of the global RM
//!   (their connections close; they reconnect, to another relay if their
//!   configuration lists one), and to the global RM like their links
//!   closing: their machines are lost only after the usual grace.
//!
//! The relay decides nothing about the pool: no state survives it.

use std::sync::Arc;
use std::time::Duration;

use carmi_api::gate::ConnLimits;
use carmi_api::handshake::Secret;

mod hub;
mod machines;
mod upstream;

pub use hub::Hub;

/// How often the machines' unchanged heartbeats are passed on, folded into
/// one message: well inside the global RM's period (a second by default),
/// so that folding delays a heartbeat by a fraction of it.
pub const DEFAULT_ALIVE: Duration = Duration::from_millis(250);

/// Settings of a relay.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// The relay's name (its certificate's, in the global RM's logs).
    pub name: String,
    /// The global RM, `HOST:PORT`.
    pub global: String,
    /// The pool's secret, with the relay's own token (power admin) when the
    /// pool has tokens.
    pub secret: Secret,
    /// How often unchanged heartbeats are passed on.
    pub alive: Duration,
    /// Caps on the machines' connections, as the global RM's.
    pub conn_limits: ConnLimits,
    /// Most messages waiting for the global RM, or for one machine.
    pub max_queued: usize,
}

impl RelayConfig {
    /// Defaults for everything but who it is, where the global RM is, and the secret.
    pub fn new(name: &str, global: &str, secret: Secret) -> RelayConfig {
        RelayConfig {
            name: name.to_string(),
            global: global.to_string(),
            secret,
            alive: DEFAULT_ALIVE,
            // A relay exists to hold many machines: room for 32,768 of them
            // (the process's open-file limit permitting).
            conn_limits: ConnLimits {
                max_connections: 32 * 1024,
                ..ConnLimits::default()
            },
            max_queued: 16 * 1024,
        }
    }
}

/// A bound, not yet running, relay.
pub struct Relay {
    listener: tokio::net::TcpListener,
    config: RelayConfig,
}

impl Relay {
    /// Binds `addr` (`HOST:PORT`; port 0 picks one).
    pub async fn bind(addr: &str, config: RelayConfig) -> std::io::Result<Relay> {
        let listener = carmi_api::net::listen(addr).await?;
        Ok(Relay { listener, config })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), String> {
        let tls = carmi_api::tls::Acceptor::generate()?;
        let hub = Arc::new(Hub::new(&self.config)?);
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let up = tokio::spawn(upstream::run(
            self.config.clone(),
            hub.clone(),
            stop.clone(),
        ));
        machines::accept_until(
            self.listener,
            shutdown,
            (&self.config, tls),
            hub.clone(),
            stop,
        )
        .await;
        let _ = stop_tx.send(true);
        hub.lose_upstream("the relay is stopping");
        let _ = tokio::time::timeout(Duration::from_secs(5), up).await;
        Ok(())
    }
}
