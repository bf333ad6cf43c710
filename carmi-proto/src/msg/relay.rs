//! What a relay and the global RM say on the one link that carries many
//! machines' links (issue 36, `carmi-relay`).
//!
//! A relay terminates its machines' TLS and handshakes itself, asks the
//! global RM whether each machine's token admits it ([`RelayUp::Admit`]),
//! then passes each machine's byte stream through as [`RelayUp::Data`] and
//! [`RelayDown::Data`] chunks of a numbered channel: the global RM serves a
//! channel exactly as it serves a machine's own connection. The one thing a
//! relay reads is the frames its machines send, to fold heartbeats that
//! change nothing into one [`RelayUp::Alive`] per period.
//!
//! ```text
//! relay -> global  Certify { key }              the relay's key, for its certificate
//! global -> relay  Certified { cert }
//! relay -> global  Admit { chan, role, presented }   a machine passed the relay's handshake
//! global -> relay  Admitted { chan, result }        Ok: the channel is open (as a new link)
//! both ways        Data { chan } + payload          bytes of the machine's connection, in order
//! relay -> global  Alive { chans }                  each named machine sent an unchanged heartbeat
//! relay -> global  Closed { chan, reason }          the machine's connection ended
//! global -> relay  Close { chan, reason }           the global RM ended the machine's link
//! ```

use serde::{Deserialize, Serialize};

use super::Role;

/// One machine's connection through a relay, numbered by the relay; never
/// reused on the same relay link.
pub type Chan = u64;

/// Most channels one `Alive` names: a relay sends several when it has more.
pub const MAX_ALIVE_CHANS: usize = 65_536;

/// Relay -> global RM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RelayUp {
    /// The relay's key ([`crate`]'s `PublicKey` text), to be certified as a
    /// relay of the pool: its machines check that certificate before they
    /// show it a token.
    Certify {
        /// The key's text.
        key: String,
    },
    /// A machine proved the pool secret to the relay in `role` and showed
    /// `presented` (its token's proof, made for the global RM and this
    /// connection): is it admitted? The answer opens the channel.
    Admit {
        /// Its channel.
        chan: Chan,
        /// What it declared (a `Role::Local`).
        role: Role,
        /// Its token's public part and proof, as the handshake carried it
        /// (`carmi_api::proof::Presented::encode`).
        presented: Option<String>,
        /// Its address, for logs.
        peer: String,
    },
    /// Bytes the machine sent (the payload), in order.
    Data {
        /// Its channel.
        chan: Chan,
    },
    /// These machines each sent a heartbeat with nothing changed since the
    /// last `Alive`.
    Alive {
        /// Their channels.
        chans: Vec<Chan>,
    },
    /// The machine's connection ended.
    Closed {
        /// Its channel.
        chan: Chan,
        /// Why, for logs.
        reason: String,
    },
}

/// Global RM -> relay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RelayDown {
    /// The relay's certificate (or why none).
    Certified {
        /// The certificate's text, or why it was refused.
        cert: Result<String, String>,
    },
    /// The answer to `Admit`: `Ok` opened the channel.
    Admitted {
        /// The channel.
        chan: Chan,
        /// Admitted, or the reason to give the machine.
        result: Result<(), String>,
    },
    /// Bytes for the machine (the payload), in order.
    Data {
        /// Its channel.
        chan: Chan,
    },
    /// The global RM ended the machine's link: the relay closes its connection.
    Close {
        /// The channel.
        chan: Chan,
        /// Why, for logs.
        reason: String,
    },
}
