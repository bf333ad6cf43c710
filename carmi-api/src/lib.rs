//! CARMI's wire protocol and the asynchronous client library.
//!
//! Every request returns a [`RequestId`](ids::RequestId) at once; its result
//! arrives later as an [`Event`](msg::Event) on the application's single event
//! stream, beside messages from its peers.
//!
//! # Layout
//! - `ids`, `msg`, `events`, `exe`, `limits`, `submit`, `submit_condor`: the protocol's
//!   data, re-exported from `carmi-proto` (pure; see that crate).
//! - `frame`: length-prefixed frames with a JSON header and a verbatim payload: the reader the
//!   handshake runs on and the writer, around the pure codec `carmi_proto::wire` (re-exported).
//! - `conn`: the typed connection every connection kind uses once its handshake is done
//!   ([`conn::Conn`]: `Out` messages one way, `In` the other, frame limit and deadline, split
//!   into halves for tasks, `recv_raw` for a server that checks a header before decoding it).
//!   No daemon or client reads or writes frames by hand (`tests/tests/one_conn.rs`).
//! - `gate`: what an unauthenticated connection may cost a daemon (caps on connections, on
//!   handshakes, on handshakes per address; the oldest handshake makes room), used by both daemons.
//! - `net`: dialing a peer (timeout, TCP_NODELAY).
//! - `handshake`: version, role, mutual HMAC challenge-response on the pool secret.
//! - `jobcred`: job credentials, what a job's processes prove instead of the pool secret.
//! - `token`: the pool's signed tokens (identity, power, machine, expiry, id), Ed25519 via ring.
//! - `tls`: TLS 1.3 under the handshake (rustls; self-signed certificates made in memory,
//!   the session bound to the pool handshake by its exported keying material).
//! - `pooldir`: the pool's directory (`/etc/carmi` for root, `~/.config/carmi` otherwise), where
//!   `carmi pool init` and `carmi join` write the pool's files and the daemons and `carmi` find them.
//! - `webcert`: the dashboard's certificate, made once by `carmi pool init` and read at every start.
//! - `files`: key and token files: written 0600, refused (as ssh does) when others may read them.
//! - `client`: the client library: `connect`, the `Carmi` handle (requests return
//!   ids at once), the merged `EventStream`, direct messages between processes,
//!   and the output of spawned processes streamed back to their requester.
//! - `admin`: administration requests to the global RM (`carmi status`, jobs).
//! - `control`: the client of a local RM's control connection ([`control::OwnerLink`]:
//!   owner events from `owner-sim` or an admin tool).
//! - `stage`: staging connections: fetching an executable from the global RM
//!   or a peer local RM, pipelined, hashed off the socket task, rate-limited sends.
//!
//! The protocol is described for implementers in `docs/protocol.md` at the
//! root of the repository.

pub mod admin;
pub mod capped;
pub mod client;
pub mod conn;
pub mod control;
pub mod coords;
pub mod exposition;
pub mod files;
pub mod frame;
pub mod gate;
pub mod handshake;
pub mod jobcred;
pub mod machinecert;
pub mod net;
pub mod pooldir;
pub mod proof;
pub mod stage;
pub mod tls;
pub mod token;
pub mod webcert;

// The protocol's data lives in `carmi-proto` (no I/O, no runtime) so that the
// daemons' pure cores can use it without tokio; re-exported here so that a
// client needs one crate.
pub use carmi_proto::{authz, events, exe, ids, limits, msg, submit, submit_condor};
