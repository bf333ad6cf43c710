//! The CARMI local resource manager: one daemon per pool machine, run by its owner.
//!
//! It advertises the machine to the global RM as a ClassAd, runs the
//! application processes the global RM places on its slots (each in a sandbox
//! directory and its own session, so that a signal reaches the process and
//! everything it started), caches staged executables by content hash, and
//! relays requests and events between the applications on this machine and
//! the global RM. It decides nothing about allocation: the global RM
//! allocates, the local RM acts.
//!
//! The owner policy decides when the machine is the pool's: jobs start only
//! while `START` holds; the owner's return suspends every job process (the
//! whole process group), a short visit resumes them, a long one vacates them
//! (SIGTERM, SIGKILL after the grace period, sandbox removed, slot withdrawn).
//! Each change reaches the global RM at once as a `SlotState`. Configuration
//! keys are listed in [`config`]; the expressions' attributes in [`policy`].
//!
//! If the global RM goes away, processes keep running; the daemon reconnects
//! with exponential backoff, re-advertises the processes still alive, and then
//! reports what happened meanwhile (starts, exits, uploads).
//!
//! # Layout
//! - `config`: command line and TOML configuration resolved into [`config::Settings`]; `--attr` parsing.
//! - `machine`: detection of the machine ad (name, arch, memory, CPUs, disk, load) and heartbeat updates.
//! - `gpu`: finding the GPUs (`nvidia-smi`, `/proc/driver/nvidia`) the ad advertises as `GPUs`.
//! - `benchmark`: the start-up integer/floating-point benchmark (`Mips`, `KFlops`) and its on-disk cache.
//! - `cache`: the content-addressed executable cache, which verifies SHA-256 and size before storing.
//! - `spawn`: sandboxes, starting a process in its own session, `wait4` with CPU time, group signals.
//! - `cgroup`: a cgroup per process (v2, else the v1 memory controller), bound to its job's requests, found, signalled and killed whole.
//! - `orphans`: on-disk records of the started process groups; a restarted daemon kills what a killed one left.
//! - `policy` (re-exported from `carmi-local-core`): the I/O-free owner policy (START/SUSPEND/CONTINUE/PREEMPT/KILL over the live ad).
//! - `owner`: owner activity sources: the real keyboard/load measurement, and the simulated owner (pure, from `carmi-local-core`).
//! - `control`: the control connection (owner events from `owner-sim`) and its client, [`control::OwnerLink`].
//! - the I/O-free router (connection states, process table, fetches, the backlog kept while the global RM is away) is `carmi_local_core::node`, in a crate of its own so that the compiler keeps it pure.
//! - `output`: forwarding a spawned process's stdout/stderr to its requester, with backpressure down to the pipe.
//! - `peer`: executable staging between machines: fetching from the global RM's store or a
//!   peer (pipelined, verified), and serving this cache, partial copies included, to peers.
//! - `apps`: the listener for application processes and one task per connection, each with a bounded queue.
//! - `perjob`: how many connections one job may hold open (`max_connections_per_job`).
//! - `isolation` and `slot_users`: as root, each job runs as an account of its own; which accounts a local RM takes (locked per machine), their creation and removal.
//! - `jobcred`: the credentials of the jobs present here: admitted for their job only, written into sandboxes, forgotten when the job leaves.
//! - `daemon_token`: this machine's daemon token, renewed by the global RM over the link: kept in its file and seen by the link, staging and control connections.
//! - `global`: the connection to the global RM: the session task, reconnecting when the link's core (`carmi_local_core::link`) says, and its bounded queue (`GlobalLink` on the driver's side, carrying out the core's `Outbox`).
//! - `input`: what the driver hears about (`Input`) and the channel ends of the connections, below every module that sends inputs.
//! - `daemon`: the driver that feeds socket, process and timer events to the core (`carmi_local_core::node`) and carries out its effects (inputs in `daemon_inputs.rs`, effects in `daemon_effects.rs`, start-up in `daemon_start.rs`); the core's `stopping` says how it stops.

#![warn(missing_docs)]

pub mod apps;
pub mod benchmark;
pub mod cache;
pub mod cgroup;
pub mod config;
pub mod control;
pub mod daemon;
pub mod daemon_token;
pub mod global;
pub mod gpu;
mod input;
pub mod isolation;
pub mod jobcred;
pub mod logread;
pub mod machine;
mod metrics;
pub mod orphans;
pub mod output;
pub mod owner;
pub mod peer;
pub mod perjob;
pub mod returned;
mod sandbox;
pub mod slot_users;
pub mod spawn;
#[cfg(test)]
mod test_dir;

/// The owner policy, under its old path (`carmi-local-core`'s `policy`).
pub use carmi_local_core::policy;

use std::path::PathBuf;

/// Everything that can stop the daemon from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is wrong (file, command line, attribute expression).
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The pool secret could not be read or is unusable.
    #[error(transparent)]
    Secret(#[from] carmi_api::handshake::HandshakeError),
    /// The token file is unreadable or others may read it.
    #[error("token file: {0}")]
    Token(#[from] carmi_api::files::FileError),
    /// A file or directory the daemon needs could not be used.
    #[error("{what} {path}: {source}")]
    Io {
        /// What the daemon was doing.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TLS certificate could not be made.
    #[error("{0}")]
    Tls(String),
    /// Job processes cannot be run as the slot users asked for.
    #[error(transparent)]
    Isolation(#[from] isolation::IsolationError),
    /// The application listener could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
}
