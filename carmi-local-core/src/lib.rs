//! The CARMI local resource manager's decisions, as pure state machines:
//! inputs and the current time in, outputs out, no I/O and no clock inside.
//!
//! The daemon (`carmi-local`) feeds them socket, process, timer and owner
//! events and carries out what they return; the simulator can run them in
//! virtual time. This crate's dependency tree holds no async runtime, so the
//! compiler checks that nothing here does I/O (`tests/pure.rs` checks the
//! tree).
//!
//! # Layout
//! - `node`: the local RM's router: connection states, process table, pending
//!   fetches, the backlog kept while the global RM is away; its `node_owner.rs`
//!   part carries out the owner policy on slots and processes, its
//!   `node_procs.rs` part fetches, launches, kills and reports processes.
//!   (Named `node`, not `core`, so as not to shadow the standard `core`.)
//! - `policy`: the owner policy (START/SUSPEND/CONTINUE/PREEMPT/KILL over the live ad).
//! - `owner`: the simulated owner, whose events the policy observes.

#![warn(missing_docs)]

pub mod node;
pub mod owner;
pub mod policy;
