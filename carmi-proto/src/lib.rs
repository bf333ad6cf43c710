//! CARMI's wire protocol as plain data, shared by the daemons' pure cores and
//! by every client.
//!
//! No I/O and no async runtime in its dependency tree, so a core that uses
//! only this crate is pure by construction (the compiler checks it): reading
//! frames from sockets and the handshake, which do I/O, live in `carmi-api`.
//!
//! # Layout
//! - `authz`: the powers a token grants and which power each action needs (one table).
//! - `ids`: newtype identifiers (requests, hosts, processes, jobs, connections).
//! - `msg`: protocol messages, typed by direction; application requests, replies
//!   and events in `msg/app.rs`, job and pool reports for admin tools in `msg/admin.rs`.
//! - `events`: a submitted job's event log (`carmi events`, `log =`), one event a line.
//! - `exe`: content-addressed executables ([`exe::ExecutableRef`]): SHA-256 and verification
//!   shared by store and caches.
//! - `limits`: the documented limit of every number and size a client sends, checked at the door;
//!   its values and single-field checks live in the private leaf `bounds`, which the submit
//!   parser uses without depending on the messages.
//! - `outcome` (private, re-exported by `msg`): how processes and jobs end (`ExitStatus`, `ProcessUsage`, the job's `Requests`,
//!   `JobEnd`), shared by the messages and the event log.
//! - `wire`: frames as bytes (length prefixes, JSON header, payload): encoder, decoder, limit;
//!   the tokio reader and writer around it are `carmi_api::frame`.
//! - `submit`: submit files (`key = value`, one `queue` per resource class), parsed purely;
//!   `submit_condor` the HTCondor submit commands it also accepts; `submit_options`
//!   what the pool does with a job (`on_impossible`).
//!
//! # Floors
//! No two modules use each other (`tests/tests/structure.rs` checks it). From
//! the bottom: `ids`, `bounds`, `exe`, `outcome`, `submit_options`, `wire`; then
//! `authz`, `events`, `submit_condor`; `submit`; `msg`; `limits` (which checks
//! whole messages). A type two floors share lives on the lower one and is
//! re-exported by the higher (`msg::ExecutableRef`, `msg::ExitStatus`,
//! `limits::MAX_*`), so every public path is unchanged.

pub mod authz;
mod bounds;
pub mod events;
pub mod exe;
pub mod ids;
pub mod limits;
pub mod msg;
mod outcome;
pub mod submit;
pub mod submit_condor;
pub mod submit_options;
pub mod wire;
