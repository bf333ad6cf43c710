//! The CARMI global resource manager's pure core: every decision the daemon
//! makes, as plain state machines that take an input and the current time and
//! return outputs ([`alloc::Allocator`], [`router::Router`]). No I/O and no
//! async runtime in its dependency tree (checked by carmi-tests' `tests/structure.rs`), so
//! tests, benchmarks and simulators drive exactly the daemon's logic in
//! virtual time; the tokio driver, the executable store and the journal file
//! live in `carmi-global`.
//!
//! # Layout
//! - `alloc`: the allocator, in parts: the pool view (`pool`), jobs and their
//!   classes (`job`), pending `AddHosts` (`pending`), waiting jobs (`queue`),
//!   which could ever start (`possible`), fair share (`share`).
//! - `bounds`: how many ended jobs and events are remembered, by the router and the journal alike.
//! - `journal`: the journal's records, the live state a compaction keeps, and their
//!   encoding and parsing (the file itself is written by the driver).
//! - `node`: the whole core as the daemon runs it (`GlobalCore`): router and
//!   staging fed from one input, and what leaves in which order (journal
//!   records first, a job's credential before a spawn, a kick for a link
//!   that stopped reading).
//! - `procs`: the process table: where each process runs, is attached, and who spawned it.
//! - `router`: everything the daemon decides, in parts: machines and their
//!   heartbeats (`router::registry`), submitted jobs and their masters
//!   (`router::jobs`), requests (`router::requests`), history and logs
//!   (`router::reports`); processes starting, exiting, attaching and leaving
//!   (`router::lifecycle`).
//! - `renewal`: when a local RM's daemon token is renewed over its link, and
//!   which replaced tokens are then revoked.
//! - `staging`: the staging tree: which source (a peer local RM or the store)
//!   answers each `Fetch`, at most `fanout` fetches per source.

#![warn(missing_docs)]

pub mod alloc;
pub mod alloc_queue;
pub mod bounds;
pub mod journal;
pub mod node;
pub mod procs;
pub mod renewal;
pub mod router;
pub mod staging;
pub mod usage;
