//! Application requests at the router, and what waits for a process or a
//! machine: `LookupProcess` requests waiting for their process to attach,
//! events for processes whose machine is away, and requests journaled as
//! outstanding across a restart. The decisions are in
//! - `dispatch.rs`: requests forwarded by local RMs, one function per
//!   request that needs the process table (the rest go to the allocator),
//! - `outstanding.rs`: requests that outlive their first answer, journaled
//!   and served again after a restart,
//! - `spec_api.rs`: what a process may read and define of its job.

use std::collections::HashMap;

use carmi_proto::ids::ProcessId;
use carmi_proto::msg::Event;

use crate::alloc::ReqRef;

mod dispatch;
mod outstanding;
mod spec_api;

/// Requests and events waiting (see the module documentation).
#[derive(Default)]
pub(super) struct Requests {
    /// `LookupProcess` requests waiting for their process to attach.
    pub lookups: Lookups,
    /// Events for processes attached through a machine whose connection is
    /// down (or which was declared lost): kept until the machine's local RM
    /// announces the process again, so that every request gets its answer.
    pub parked: HashMap<ProcessId, Vec<Event>>,
    /// Requests journaled as outstanding in this run (see `outstanding.rs`).
    pub outstanding: outstanding::Outstanding,
}

/// `LookupProcess` requests waiting, by the process they wait for.
#[derive(Default)]
pub(super) struct Lookups {
    waiting: HashMap<ProcessId, Vec<ReqRef>>,
    /// Grows whenever requests stop waiting, so that the outstanding
    /// requests are settled again only then (see `outstanding.rs`).
    ended: u64,
}

impl Lookups {
    /// `req` waits for `process` to attach.
    pub fn wait(&mut self, process: ProcessId, req: ReqRef) {
        self.waiting.entry(process).or_default().push(req);
    }

    /// The requests waiting for `process`, which stop waiting. Counted
    /// only when some did: every process that exits or attaches is asked.
    pub fn take(&mut self, process: ProcessId) -> Vec<ReqRef> {
        let Some(waiting) = self.waiting.remove(&process) else {
            return Vec::new();
        };
        self.ended += 1;
        waiting
    }

    /// Whether `req` waits for `process`.
    pub fn is_waiting(&self, process: ProcessId, req: ReqRef) -> bool {
        self.waiting.get(&process).is_some_and(|w| w.contains(&req))
    }

    /// Every process waited for, with its waiting requests.
    pub fn iter(&self) -> impl Iterator<Item = (&ProcessId, &Vec<ReqRef>)> {
        self.waiting.iter()
    }

    /// How many times requests stopped waiting so far.
    pub fn ended(&self) -> u64 {
        self.ended
    }
}
