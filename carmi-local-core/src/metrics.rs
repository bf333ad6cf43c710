//! What the local RM's core counts for its `/metrics` page
//! (`carmi-local --metrics-addr`, `docs/metrics.md`): pure numbers, taken
//! with [`crate::node::Core::metrics`]; the driver adds what only it sees
//! (the owner policy's state, bytes served to peers) and writes the page.

use crate::policy::PolicyEffect;

/// Counters that grow as the core decides: by-products of its decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Owner policy effects carried out, by [`effect_index`].
    pub policy_effects: [u64; EFFECTS.len()],
    /// Bytes of executables staged to this machine and stored (from the
    /// global RM's store or a peer's cache).
    pub staged_in_bytes: u64,
    /// Bytes of executables applications here uploaded to the global RM.
    pub uploaded_bytes: u64,
    /// Processes started here that exited (killed or not).
    pub processes_exited: u64,
}

/// Every policy effect, in the order of [`Counters::policy_effects`], with
/// the label the page gives it.
pub const EFFECTS: [(PolicyEffect, &str); 6] = [
    (PolicyEffect::Open, "open"),
    (PolicyEffect::Close, "close"),
    (PolicyEffect::Suspend, "suspend"),
    (PolicyEffect::Resume, "resume"),
    (PolicyEffect::Vacate, "vacate"),
    (PolicyEffect::Kill, "kill"),
];

/// Where `effect` is counted in [`Counters::policy_effects`].
pub fn effect_index(effect: PolicyEffect) -> usize {
    EFFECTS
        .iter()
        .position(|(e, _)| *e == effect)
        .expect("EFFECTS lists every PolicyEffect")
}

/// The core's numbers at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Slots by state: `idle` (open, nothing runs), `busy` (a process runs
    /// in it), `suspended` (owner back, processes stopped), `vacated`
    /// (withdrawn for the owner); every state listed, 0 where none.
    pub slots: Vec<(&'static str, u64)>,
    /// Processes here by stage: `fetching` (waiting for the executable),
    /// `launching`, `running`; masters included.
    pub processes: Vec<(&'static str, u64)>,
    /// Application connections open.
    pub apps: u64,
    /// Registered with the global RM now.
    pub registered: bool,
    /// Messages kept for the global RM while it is away.
    pub backlog: u64,
    /// The counters.
    pub counters: Counters,
}
