//! The control connection: a tool (`owner-sim`, an admin) connects to the
//! local RM's listen address with the pool secret and handshake role
//! [`Role::Admin`](carmi_api::msg::Role::Admin), then sends
//! [`ToLocalControl`] frames; each is answered with one
//! [`FromLocalControl`],
//! in order. The client side, [`OwnerLink`], is in `carmi_api::control`
//! (re-exported here under its old path).

use std::net::SocketAddr;

use carmi_api::conn::{ConnReader, ConnWriter};
use carmi_api::msg::{FromLocalControl, ToLocalControl};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};

pub use carmi_api::control::{ControlError, OwnerLink};

use crate::input::{Input, stopped};

/// Serves one control connection whose handshake is done.
pub(crate) async fn serve<R, W>(
    mut reader: ConnReader<ToLocalControl, R>,
    mut writer: ConnWriter<FromLocalControl, W>,
    peer: SocketAddr,
    inputs: mpsc::Sender<Input>,
    mut stop: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tracing::info!(%peer, "control connection opened");
    loop {
        let frame = tokio::select! {
            f = reader.recv() => f,
            _ = stopped(&mut stop) => break,
        };
        let msg = match frame {
            Ok(Some((msg, _))) => msg,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad frame on a control connection; closing it");
                break;
            }
        };
        let ToLocalControl::Owner(event) = msg;
        let (tx, rx) = oneshot::channel();
        if inputs.send(Input::Owner(event, Some(tx))).await.is_err() {
            break;
        }
        let Ok(answer) = rx.await else { break };
        if let Err(e) = writer.send(&answer, &[]).await {
            tracing::debug!(%peer, error = %e, "control connection gone");
            break;
        }
    }
    tracing::info!(%peer, "control connection closed");
}
