//! CARMI's wire protocol as plain data, shared by the daemons' pure cores and
//! by every client.
//!
//! No I/O and no async runtime in its dependency tree, so a core that uses
//! only this crate is pure by construction (the compiler checks it): the
//! framing and the handshake, which do I/O, live in `carmi-api`.
//!
//! # Layout
//! - `authz`: the powers a token grants and which power each action needs (one table).
//! - `ids`: newtype identifiers (requests, hosts, processes, jobs, connections).
//! - `msg`: protocol messages, typed by direction; application requests, replies
//!   and events in `msg/app.rs`, job and pool reports for admin tools in `msg/admin.rs`.
//! - `events`: a submitted job's event log (`carmi events`, `log =`), one event a line.
//! - `exe`: content-addressed executables: SHA-256 and verification shared by store and caches.
//! - `limits`: the documented limit of every number and size a client sends, checked at the door.
//! - `submit`: submit files (`key = value`, one `queue` per resource class), parsed purely;
//!   `submit_condor` the HTCondor submit commands it also accepts.

pub mod authz;
pub mod events;
pub mod exe;
pub mod ids;
pub mod limits;
pub mod msg;
pub mod submit;
pub mod submit_condor;
