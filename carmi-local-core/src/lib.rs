//! The CARMI local resource manager's decisions, as pure state machines:
//! inputs and the current time in, outputs out, no I/O and no clock inside.
//!
//! The daemon (`carmi-local`) feeds them socket, process, timer and owner
//! events and carries out what they return; the simulator can run them in
//! virtual time. This crate's dependency tree holds no async runtime, so the
//! compiler checks that nothing here does I/O (carmi-tests' `tests/structure.rs` checks the
//! tree).
//!
//! # Layout
//! - `node`: the local RM's router: connection states, process table, pending
//!   fetches, the backlog kept while the global RM is away; its parts:
//!   `node_apps.rs` application connections, `node_procs.rs` fetching,
//!   launching, killing and reporting processes, `node_owner.rs` the owner
//!   policy's effects on slots and processes, `node_policy.rs` stepping the
//!   policy and when it is due, `node_time.rs` the deadlines (kill grace,
//!   heartbeats) and shutdown.
//!   (Named `node`, not `core`, so as not to shadow the standard `core`.)
//! - `link`: the link to the global RM as the driver keeps it: when to reconnect
//!   (backoff), what waits for room in a session's queue, when a stalled session is kicked.
//! - `stopping`: how the daemon stops: the wait for the global RM to act on
//!   `Leaving`, then for the killed processes' exits, each with its deadline.
//! - `ad`: the machine ad and its heartbeat updates, from detected, sampled and configured attributes.
//! - `gpu`: the GPUs of the ad, parsed from what `nvidia-smi` and `/proc/driver/nvidia` say.
//! - `policy`: the owner policy (START/SUSPEND/CONTINUE/PREEMPT/KILL over the live ad).
//! - `owner`: the simulated owner, whose events the policy observes.
//! - `binding`: what a process's cgroup is set to from its job's requests, and
//!   what its counters mean at its exit (over its `request_memory` or not).

#![warn(missing_docs)]

pub mod ad;
pub mod binding;
pub mod gpu;
pub mod link;
pub mod metrics;
pub mod node;
pub mod owner;
pub mod policy;
pub mod stopping;

#[cfg(test)]
#[path = "pair_tests.rs"]
mod pair_tests;
