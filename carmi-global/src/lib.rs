//! The CARMI global resource manager: the pool registry (machine ads, slot
//! states, heartbeats), the allocator (which job gets which host), the
//! request router and the process table, behind a thin tokio driver.
//!
//! Every decision is made by plain state machines that take an input and the
//! current time and return outputs ([`alloc::Allocator`], [`router::Router`]),
//! in the crate `carmi-global-core` (no I/O, no tokio), re-exported here as
//! `alloc`, `procs`, `router` and `staging`; the driver ([`server::Server`])
//! only decodes frames, calls them, and writes what they say. Tests and the
//! benchmark drive the same code with virtual time.
//!
//! # Layout
//! - `journal`: accepted jobs and their state changes on disk, replayed after a restart
//!   (the records and their parsing are the core's `journal`, re-exported).
//! - `store`: executables stored by content hash under the state directory.
//! - `server`: the tokio driver: listener, handshake, framing, one router task; a bounded
//!   outgoing queue per connection (a peer that stops reading is disconnected); each
//!   connection's task in `server::conn`.
//! - `dashboard`: the web dashboard (`--http`): page, JSON API, server-sent events;
//!   its view model (lost machines, the pool's curve) in `dashboard::view`.
//! - `authority`: tokens, identities and powers (`--pool-key`): who may do what.
//! - `checkpoint`: a job's checkpoint copied from the returned files into the executable store.
//! - `ha`: standby managers: the lease on shared storage, the journal streamed to standbys, takeover.
//! - `idmark`: the job-id high-water mark, so that ids (and so credentials) never repeat.
//! - `jobcred`: each job's own credential, derived from the state directory's job key.
//! - `pilots`: carries out the allocation queues' commands on a batch system (`sbatch`...).
//! - `main.rs`: the `carmi-global` command.

#![warn(missing_docs)]

pub use carmi_global_core::{alloc, node, procs, router, staging};
pub mod authority;
pub mod checkpoint;
pub mod dashboard;
pub mod ha;
pub mod idmark;
pub mod jobcred;
pub mod journal;
pub mod metrics;
pub mod pilots;
pub mod returned;
pub mod server;
pub mod store;

/// What can stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The state directory is unusable.
    #[error("state directory: {0}")]
    Store(#[from] store::StoreError),
    /// The journal cannot be opened.
    #[error("journal in {path}: {source}")]
    Journal {
        /// The state directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TLS could not be set up (no certificate could be made).
    #[error("TLS: {0}")]
    Tls(String),
    /// The key job credentials are derived from cannot be read or made.
    #[error("job key: {0}")]
    JobKey(String),
}
