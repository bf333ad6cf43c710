//! The control connection: a tool (`owner-sim`, an admin) connects to the
//! local RM's listen address with the pool secret and handshake role
//! [`Role::Admin`](carmi_api::msg::Role::Admin), then sends
//! [`ToLocalControl`] frames; each is answered with one
//! [`FromLocalControl`],
//! in order. The client side, [`OwnerLink`], is in `carmi_api::control`
//! (re-exported here under its old path).
//!
//! Who may open one ([`ControlAccess`], `docs/security.md`): in a pool with
//! tokens, the machine's owner, who holds this local RM's own daemon token,
//! or an admin, whose token the global RM checks (it knows the
//! revocations: a local RM cannot verify a token's signature). In a pool
//! without tokens (this local RM has none), whoever knows the pool secret.

use std::net::SocketAddr;

use carmi_api::authz::{Power, TokenAnswer, TokenRequest};
use carmi_api::conn::{ConnReader, ConnWriter};
use carmi_api::handshake::Secret;
use carmi_api::msg::{FromGlobal, FromLocalControl, ToGlobal, ToLocalControl};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};

pub use carmi_api::control::{ControlError, OwnerLink};

use crate::daemon_token::DaemonToken;
use crate::input::{Input, stopped};

/// Who may open a control connection to this local RM (see the module
/// documentation).
#[derive(Clone)]
pub(crate) struct ControlAccess {
    /// This local RM's own daemon token (none: a pool without tokens), as
    /// renewed.
    own_token: DaemonToken,
    /// This machine's name, which the proofs shown to it name.
    name: String,
    /// The global RM, which checks every token shown here.
    global: String,
    /// The pool secret, to reach the global RM with this machine's token.
    secret: Secret,
}

impl ControlAccess {
    pub(crate) fn new(
        own_token: DaemonToken,
        name: String,
        global: String,
        secret: Secret,
    ) -> ControlAccess {
        ControlAccess {
            own_token,
            name,
            global,
            secret,
        }
    }

    /// Whether a connection that showed `shown` may do `what` (open a
    /// control connection, join a job without its credential): checked in
    /// its handshake, so that a refusal reaches the client. A pool without
    /// tokens admits it; else it needs this machine's own daemon token or
    /// one with power admin, as the global RM says (it knows the
    /// revocations and expiries, and it alone can check a holder's proof).
    pub(crate) async fn admit(
        &self,
        what: &str,
        shown: Option<&carmi_api::proof::Presented>,
    ) -> Result<(), String> {
        let ours = |power, machine: Option<&str>| {
            power == Power::Admin || (power == Power::Daemon && machine == Some(self.name.as_str()))
        };
        let needs = format!("{what} needs this machine's daemon token or power admin");
        self.admit_if(&needs, shown, ours).await
    }

    /// Whether a connection that showed `shown` may do `what` (fetch an
    /// executable from this machine's staging listener): any machine's
    /// daemon token or power admin, as the global RM says; in a pool
    /// without tokens, anyone who proved the pool secret.
    pub(crate) async fn admit_any_machine(
        &self,
        what: &str,
        shown: Option<&carmi_api::proof::Presented>,
    ) -> Result<(), String> {
        let any = |power, _: Option<&str>| matches!(power, Power::Daemon | Power::Admin);
        let needs = format!("{what} needs a machine's daemon token or power admin");
        self.admit_if(&needs, shown, any).await
    }

    /// `Ok` in a pool without tokens, or if the global RM vouches for
    /// `shown` and `allowed` takes its power and machine; else why not,
    /// starting with `needs`.
    async fn admit_if(
        &self,
        needs: &str,
        shown: Option<&carmi_api::proof::Presented>,
        allowed: impl Fn(Power, Option<&str>) -> bool,
    ) -> Result<(), String> {
        let Some(own) = self.own_token.get() else {
            return Ok(());
        };
        let Some(shown) = shown else {
            return Err(format!("{needs}; none was presented"));
        };
        let (identity, power, machine) = self.vouch(&own, shown).await?;
        if allowed(power, machine.as_deref()) {
            return Ok(());
        }
        Err(format!("{needs}; `{identity}` (power {power}) has neither"))
    }

    /// Asks the global RM, over a connection of this machine's own, what
    /// the token shown here is (a forged, expired or revoked token, or a
    /// proof made for another machine or used before, is refused there).
    async fn vouch(
        &self,
        own: &str,
        shown: &carmi_api::proof::Presented,
    ) -> Result<(String, Power, Option<String>), String> {
        let secret = self.secret.clone().with_token(Some(own.to_string()));
        let ask = ToGlobal::Tokens(TokenRequest::Vouch {
            shown: shown.encode(),
        });
        match carmi_api::admin::request(&self.global, &secret, None, ask).await {
            Ok(FromGlobal::Tokens(TokenAnswer::Vouched {
                identity,
                power,
                machine,
            })) => Ok((identity, power, machine)),
            Ok(FromGlobal::AdminFailed(f)) => Err(format!(
                "the token shown was refused; the global RM says: {}",
                f.message
            )),
            Ok(other) => Err(format!(
                "the global RM could not say whether the token may (it sent {other:?})"
            )),
            Err(e) => Err(format!("the global RM did not vouch for the token: {e}")),
        }
    }
}

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
