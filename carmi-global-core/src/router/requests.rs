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
    pub lookups: HashMap<ProcessId, Vec<ReqRef>>,
    /// Events for processes attached through a machine whose connection is
    /// down (or which was declared lost): kept until the machine's local RM
    /// announces the process again, so that every request gets its answer.
    pub parked: HashMap<ProcessId, Vec<Event>>,
    /// Requests journaled as outstanding in this run (see `outstanding.rs`).
    pub outstanding: outstanding::Outstanding,
}
