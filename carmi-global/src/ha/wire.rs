//! The replication link's messages, typed by direction: the active manager
//! opens a connection to each standby's `--ha-listen` and sends
//! [`ToStandby`]; the standby answers [`ToActive`]. Each message but
//! [`ToStandby::Tick`] carries a sequence number the standby acknowledges
//! once what it says is on its disk.

use serde::{Deserialize, Serialize};

/// Active -> standby.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToStandby {
    /// A copy of the whole state follows: the standby forgets what it held.
    Begin {
        /// Sequence number.
        seq: u64,
        /// The active's epoch (the lease's): an older one is refused.
        epoch: u64,
        /// The active's replication name.
        active: String,
        /// Where the active serves the pool.
        serving: String,
        /// The name the active knows this standby by (its `--ha-peers` entry).
        you: String,
    },
    /// A file of the state directory, its bytes the payload.
    File {
        /// Sequence number.
        seq: u64,
        /// Its path relative to the state directory.
        path: String,
    },
    /// A file of the state directory is gone.
    Remove {
        /// Sequence number.
        seq: u64,
        /// Its path relative to the state directory.
        path: String,
    },
    /// The whole journal (after a compaction, or in the first copy), the payload.
    Journal {
        /// Sequence number.
        seq: u64,
        /// Records the active's journal has taken in this epoch.
        records: u64,
    },
    /// Records appended to the journal, the payload.
    Append {
        /// Sequence number.
        seq: u64,
        /// Records the active's journal has taken in this epoch, these included.
        records: u64,
    },
    /// The copy begun by `Begin` is whole: the standby may take over from now on.
    Synced {
        /// Sequence number.
        seq: u64,
    },
    /// Still here (once a second): where the active's journal is.
    Tick {
        /// Records the active's journal has taken in this epoch.
        records: u64,
    },
}

/// Standby -> active.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToActive {
    /// Everything up to `seq` is on the standby's disk.
    Ack {
        /// The last sequence number applied.
        seq: u64,
    },
}

/// The handshake role both ends declare (the link has a port of its own:
/// the role names nothing more).
pub fn role() -> carmi_api::msg::Role {
    carmi_api::msg::Role::Admin
}

/// Largest frame on the link: a stored executable travels whole (the
/// peer has proved the pool's signing key before any frame is read).
pub const MAX_FRAME: usize = 1 << 30;
