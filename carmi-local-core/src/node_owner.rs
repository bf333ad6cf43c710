//! The core's side of the owner policy: which processes to stop, continue
//! or vacate, what to tell the global RM about each slot, and whether new
//! processes may start.

use bytes::Bytes;
use carmi_proto::ids::ProcessId;
use carmi_proto::msg::{SlotActivity, ToGlobal};

use super::{Core, Effect, ProcState};

impl Core {
    /// Whether new processes may start (the policy's `START`); spawns are
    /// refused with a reason while not.
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    /// True while new processes may start.
    pub fn is_accepting(&self) -> bool {
        self.accepting
    }

    /// Stops the processes of `slot` and tells the global RM. False if there is no such slot.
    pub fn suspend_slot(&mut self, slot: u32) -> bool {
        self.set_slot(slot, SlotActivity::Suspended)
    }

    /// Continues the processes of `slot` and tells the global RM. False if there is no such slot.
    pub fn resume_slot(&mut self, slot: u32) -> bool {
        self.set_slot(slot, SlotActivity::Available)
    }

    /// Owner back: every slot Suspended, every process stopped.
    pub fn suspend_all(&mut self) {
        self.set_all(SlotActivity::Suspended);
    }

    /// Owner gone: every slot Available, every process continued.
    pub fn resume_all(&mut self) {
        self.set_all(SlotActivity::Available);
    }

    /// `START` holds again: every slot Available (offered to the pool).
    pub fn open_all(&mut self) {
        self.set_all(SlotActivity::Available);
    }

    /// `START` no longer holds on an empty machine: every slot withdrawn (Vacated).
    pub fn close_all(&mut self) {
        self.set_all(SlotActivity::Vacated);
    }

    /// The owner stayed: every slot Vacated, every process gets SIGTERM
    /// (SIGKILL follows from [`Core::kill_all`]); processes not started yet
    /// are dropped or killed as soon as they start.
    pub fn vacate_all(&mut self) {
        self.set_all(SlotActivity::Vacated);
        let ids: Vec<ProcessId> = self.procs.keys().copied().collect();
        for process in ids {
            let p = self.procs.get_mut(&process).expect("listed above");
            match p.state {
                ProcState::Running { killing } => {
                    p.state = ProcState::Running { killing: true };
                    self.effects.push(Effect::Terminate(process));
                    // Told before its `Exited`, so that a master's end is
                    // taken for an eviction, not for its job's end.
                    if !killing {
                        self.send_or_keep(ToGlobal::Vacating { process }, Bytes::new());
                    }
                }
                ProcState::Launching { .. } | ProcState::Fetching => self.on_kill(process),
            }
        }
    }

    /// Vacating took too long: SIGKILL to every process still running.
    pub fn kill_all(&mut self) {
        for process in self.running() {
            self.effects.push(Effect::KillNow(process));
        }
    }

    fn set_all(&mut self, state: SlotActivity) {
        for slot in 0..self.slots as u32 {
            self.set_slot(slot, state);
        }
    }

    fn set_slot(&mut self, slot: u32, state: SlotActivity) -> bool {
        let s = slot as usize;
        if s >= self.slots {
            return false;
        }
        let old = self.slot_states[s];
        if old == state {
            return true;
        }
        self.slot_states[s] = state;
        let on_slot: Vec<ProcessId> = self
            .procs
            .iter()
            .filter(|(_, p)| p.slot == Some(s) && matches!(p.state, ProcState::Running { .. }))
            .map(|(id, _)| *id)
            .collect();
        // Vacated processes are signalled by `vacate_all`.
        let signal = match (old, state) {
            (_, SlotActivity::Suspended) => Some(Effect::Suspend as fn(ProcessId) -> Effect),
            (SlotActivity::Suspended, SlotActivity::Available) => Some(Effect::Resume as _),
            _ => None,
        };
        if let Some(signal) = signal {
            for process in on_slot {
                self.effects.push(signal(process));
            }
        }
        // Not kept while disconnected: the current state is re-sent on registration.
        if self.is_registered() {
            self.send(ToGlobal::SlotState { slot, state }, Bytes::new());
        }
        true
    }
}
