//! CARMI's wire protocol and the asynchronous client library.
//!
//! Every request returns a [`RequestId`](ids::RequestId) at once; its result
//! arrives later as an [`Event`](msg::Event) on the application's single event
//! stream, beside messages from its peers.
//!
//! # Layout
//! - `ids`: newtype identifiers (requests, hosts, processes, jobs, connections).
//! - `msg`: protocol messages, typed by direction; application requests, replies
//!   and events in `msg/app.rs`, job and pool reports for admin tools in `msg/admin.rs`.
//! - `events`: a submitted job's event log (`carmi events`, `log =`), one event a line.
//! - `exe`: content-addressed executables: SHA-256 and verification shared by store and caches.
//! - `frame`: length-prefixed frames with a JSON header and a verbatim payload.
//! - `net`: dialing a peer (timeout, TCP_NODELAY).
//! - `handshake`: version, role, mutual HMAC challenge-response on the pool secret.
//! - `client`: the client library: `connect`, the `Carmi` handle (requests return
//!   ids at once), the merged `EventStream`, direct messages between processes,
//!   and the output of spawned processes streamed back to their requester.
//! - `admin`: administration requests to the global RM (`carmi status`, jobs).
//! - `stage`: staging connections: fetching an executable from the global RM
//!   or a peer local RM, pipelined, hashed off the socket task, rate-limited sends.
//! - `limits`: the documented limit of every number and size a client sends, checked at the door.
//! - `submit`: submit files (`key = value`, one `queue` per resource class), parsed purely.
//!
//! The protocol is described for implementers in `docs/protocol.md` at the
//! root of the repository.

pub mod admin;
pub mod client;
pub mod coords;
pub mod events;
pub mod exe;
pub mod frame;
pub mod handshake;
pub mod ids;
pub mod limits;
pub mod msg;
pub mod net;
pub mod stage;
pub mod submit;
pub mod submit_condor;
