//! A local RM's control connection: owner events in, one answer each out.
//! Re-exported from [`crate::msg`].

use serde::{Deserialize, Serialize};

/// What an owner-activity source tells a local RM. Real machines measure
/// their owner themselves; simulated owners (`owner-sim`) report through this,
/// either in-process (`carmi_local::daemon::Daemon::owner_event`) or over the
/// local RM's control connection.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum OwnerEvent {
    /// The owner is at the machine: keyboard idle time is zero from now on.
    Arrive,
    /// The owner left: keyboard idle time counts up from zero.
    Leave,
    /// The load average the owner's own programs put on the machine.
    Load(f64),
}

/// Control tool (`owner-sim`, an admin) -> local RM, on a connection whose
/// handshake role is [`Role::Admin`](super::Role::Admin) (the local RM's control connection).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToLocalControl {
    /// Owner activity, for a local RM whose owner source is `simulated`.
    Owner(OwnerEvent),
}

/// Local RM -> control tool: one answer per [`ToLocalControl`], in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromLocalControl {
    /// The owner event was taken in and the policy evaluated; any suspend,
    /// resume or vacate it caused has been signalled before this was sent.
    OwnerApplied {
        /// False if the local RM measures a real owner and ignored the event.
        applied: bool,
        /// The machine's policy state afterwards (`Owner`, `Unclaimed`, `Claimed`, `Preempting`).
        state: String,
        /// Its activity afterwards (`Idle`, `Busy`, `Suspended`, `Vacating`, `Killing`).
        activity: String,
    },
}
