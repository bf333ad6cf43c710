//! The core's numbers for the local RM's `/metrics` page.

use carmi_proto::msg::SlotActivity;

use super::{Core, ProcState};
use crate::metrics::Metrics;

impl Core {
    /// The slots, processes, link and counters now.
    pub fn metrics(&self) -> Metrics {
        let busy: std::collections::BTreeSet<usize> =
            self.procs.values().filter_map(|p| p.slot).collect();
        let mut slots = [("idle", 0), ("busy", 0), ("suspended", 0), ("vacated", 0)];
        for (i, state) in self.slot_states.iter().enumerate() {
            let at = match state {
                SlotActivity::Available if busy.contains(&i) => 1,
                SlotActivity::Available => 0,
                SlotActivity::Suspended => 2,
                SlotActivity::Vacated => 3,
            };
            slots[at].1 += 1;
        }
        let mut processes = [("fetching", 0), ("launching", 0), ("running", 0)];
        for p in self.procs.values() {
            let at = match p.state {
                ProcState::Fetching => 0,
                ProcState::Launching { .. } => 1,
                ProcState::Running { .. } => 2,
            };
            processes[at].1 += 1;
        }
        Metrics {
            slots: slots.to_vec(),
            processes: processes.to_vec(),
            apps: self.apps.len() as u64,
            registered: self.is_registered(),
            backlog: self.backlog.len() as u64,
            counters: self.counters,
        }
    }
}
