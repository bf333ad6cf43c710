//! The client of a local RM's control connection: a tool (`owner-sim`, an
//! admin) connects to the local RM's listen address with the pool secret and
//! handshake role [`Role::Admin`], then sends [`ToLocalControl`] frames; each
//! is answered with one [`FromLocalControl`], in order. Here, not in the
//! daemon, so that a tool talking to a local RM does not link the daemon; the
//! serving half is `carmi_local::control`.

use std::time::Duration;

use crate::conn::Conn;
use crate::handshake::{self, Secret};
use crate::msg::{FromLocalControl, OwnerEvent, Role, ToLocalControl};

/// Why talking to a local RM's control connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Connecting failed.
    #[error("cannot connect to the local RM at {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The handshake failed (wrong secret, other version).
    #[error("handshake with the local RM at {addr} failed: {source}")]
    Handshake {
        /// The address.
        addr: String,
        /// The cause.
        source: handshake::HandshakeError,
    },
    /// Writing or reading a frame failed, or the local RM closed the connection.
    #[error("control connection to {addr}: {reason}")]
    Link {
        /// The address.
        addr: String,
        /// What went wrong.
        reason: String,
    },
}

/// A control connection to one local RM, for reporting a simulated owner.
pub struct OwnerLink {
    addr: String,
    conn: Conn<ToLocalControl, FromLocalControl>,
}

impl OwnerLink {
    /// Connects to the local RM at `addr` (its application listen address).
    pub async fn connect(addr: &str, secret: &Secret) -> Result<OwnerLink, ControlError> {
        let stream = crate::net::dial(addr, Duration::from_secs(5))
            .await
            .map_err(|source| ControlError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        // A local RM takes TLS only; the proof covers the session.
        let crate::tls::Stream {
            reader,
            writer,
            binding,
        } = crate::tls::connect(stream)
            .await
            .map_err(|source| ControlError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let mut conn = Conn::new(reader, writer);
        let (reader, writer) = conn.parts_mut();
        let towards = handshake::Towards::Local;
        handshake::client_towards(reader, writer, secret, &Role::Admin, &binding, towards)
            .await
            .map_err(|source| ControlError::Handshake {
                addr: addr.to_string(),
                source,
            })?;
        Ok(OwnerLink {
            addr: addr.to_string(),
            conn,
        })
    }

    /// Reports `event` and waits until the local RM has acted on it (any
    /// suspend, resume or vacate it causes has been signalled); returns its answer.
    pub async fn send(&mut self, event: OwnerEvent) -> Result<FromLocalControl, ControlError> {
        let link = |reason: String| ControlError::Link {
            addr: self.addr.clone(),
            reason,
        };
        self.conn
            .send(&ToLocalControl::Owner(event), &[])
            .await
            .map_err(|e| link(e.to_string()))?;
        match self.conn.recv().await {
            Ok(Some((answer, _))) => Ok(answer),
            Ok(None) => Err(link("closed by the local RM".into())),
            Err(e) => Err(link(e.to_string())),
        }
    }
}
