//! A local RM's link keeps its daemon token alive: renewed over the link
//! before it expires (when, in `carmi_global_core::renewal`), the link then
//! standing on the new token, and the tokens it replaced revoked once the
//! local RM says it saved the new one. A revoked or expired token still ends
//! the link at once.

use bytes::Bytes;
use carmi_api::msg::FromGlobal;
use carmi_api::token::now_unix;
use carmi_global_core::renewal::{self, Renewals, Step};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{Outgoing, Shared};
use crate::authority::{Admitted, Authority};

/// Resolves, with why, once the token the link stands on is revoked or
/// expires; meanwhile renews it when due, sending the new token on `out`,
/// and revokes replaced tokens as the local RM's answers (`taken`: whether
/// it saved the new token) arrive. Never resolves for a link without a
/// token (a pool without tokens).
pub(super) async fn keep_token(
    shared: &Shared,
    admitted: Option<Admitted>,
    out: mpsc::Sender<Outgoing>,
    mut taken: mpsc::UnboundedReceiver<bool>,
) -> String {
    let (Some(auth), Some(mut current)) = (shared.auth.as_deref(), admitted) else {
        return std::future::pending().await;
    };
    let mut renewals = Renewals::default();
    let mut failed_at = None;
    loop {
        let now = now_unix();
        let wake = match renewal::decide(&current.life(), now, failed_at) {
            Step::Renew => {
                match renew(auth, &current, now, &out) {
                    Ok(renewed) => {
                        renewals.sent(std::mem::replace(&mut current, renewed).identity.token);
                        failed_at = None;
                    }
                    Err(e) => {
                        warn!(
                            identity = current.identity.name,
                            token = current.identity.token,
                            "cannot renew the link's daemon token: {e}"
                        );
                        failed_at = Some(now);
                    }
                }
                continue;
            }
            Step::Wait(wake) => wake,
            Step::Expired => return auth.until_invalid(&current, false).await,
        };
        let sleep = async {
            match wake {
                Some(at) => {
                    // Whole seconds, like the expiry the token is checked at.
                    let left = at.saturating_sub(now_unix()).min(3600);
                    tokio::time::sleep(std::time::Duration::from_secs(left)).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = auth.until_invalid(&current, false) => return reason,
            () = sleep => {}
            answer = taken.recv() => match answer {
                Some(saved) => match renewals.taken(saved) {
                    Ok(ids) => auth.retire(ids),
                    Err(e) => warn!(identity = current.identity.name, "{e}"),
                },
                // The reading side ended: so does this link, at once.
                None => return std::future::pending().await,
            },
        }
    }
}

/// Makes the new token and queues it for the link; a full queue is a
/// failure (tried again later) made before the token is signed.
fn renew(
    auth: &Authority,
    current: &Admitted,
    now: u64,
    out: &mpsc::Sender<Outgoing>,
) -> Result<Admitted, String> {
    let permit = (out.try_reserve()).map_err(|e| format!("the link's queue is not free: {e}"))?;
    let (token, renewed) = auth.renew(current, now)?;
    debug!(
        identity = renewed.identity.name,
        token = renewed.identity.token,
        "sending a renewed daemon token"
    );
    permit.send(Outgoing::Frame(
        FromGlobal::TokenRenewed { token },
        Bytes::new(),
    ));
    Ok(renewed)
}
