//! Standby managers (issue 35): `carmi-global` on two or three hosts, one
//! active, the others holding a copy of its state directory written as the
//! active writes it, so that a submit the active acknowledged survives the
//! loss of its machine and disk (docs/standby.md).
//!
//! - Who is active is decided by a lock on a file all managers share
//!   ([`lease`]); no consensus protocol of our own.
//! - The active streams its journal appends, and every other file of its
//!   state directory, to each standby and waits for their acknowledgement
//!   before an append returns ([`feed`]); the standby writes them into its
//!   own state directory ([`replica`]).
//! - A standby that gets the lock opens its state directory exactly as a
//!   restart does: the journal replayed, local RMs re-registering, and
//!   applications resending what they wait for.
//!
//! The link is TLS with the pool handshake, on a secret derived from the
//! pool's signing key, which only managers hold.

pub mod feed;
pub mod files;
pub mod lease;
pub mod replica;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use carmi_api::handshake::Secret;
use tracing::{info, warn};

use lease::{Lease, LeaseInfo};

/// How often a standby tries the lock.
pub const TRY_PERIOD: Duration = Duration::from_millis(200);

/// A manager's part in the set of managers.
#[derive(Clone)]
pub struct HaConfig {
    /// The lease file on storage all managers share (`--ha-lock`).
    pub lock: PathBuf,
    /// Where this manager takes the replication stream while standing by,
    /// and its name in the lease and in the others' `--ha-peers`.
    pub listen: String,
    /// The other managers' `--ha-listen`.
    pub peers: Vec<String>,
    /// Where this manager serves the pool once active (`--listen`).
    pub serving: String,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The replication link's secret.
    pub secret: Secret,
}

/// The replication link's secret: the pool's signing key file's bytes
/// under a label of their own, so that only a holder of the key (a
/// manager) can open or take a stream; the pool secret in a pool without
/// a key (`--insecure`).
pub fn link_secret(pool_key: Option<&Path>, pool_secret: &Secret) -> std::io::Result<Secret> {
    let Some(key) = pool_key else {
        return Ok(pool_secret.clone());
    };
    let mut bytes = b"carmi replication link\n".to_vec();
    bytes.extend(std::fs::read(key)?);
    Secret::new(&bytes).map_err(std::io::Error::other)
}

/// What a manager that became active holds.
pub struct Active {
    /// The lease.
    pub lease: Lease,
    /// What the lease file says now (this manager's epoch).
    pub info: LeaseInfo,
}

/// Stands by until this manager holds the lease and may take over:
/// meanwhile it takes the active's stream and refuses the pool's clients
/// with where the active is. Then the lease names it active at a new
/// epoch, and its state directory is ready for [`Server::bind`](crate::server::Server::bind).
pub async fn stand_by(config: &HaConfig) -> std::io::Result<Active> {
    std::fs::create_dir_all(&config.state_dir)?;
    let replica = replica::Replica::new(&config.listen, &config.state_dir, &config.lock);
    let repl = carmi_api::net::listen(&config.listen).await?;
    let pool = carmi_api::net::listen(&config.serving).await?;
    let serve = tokio::spawn(replica.clone().serve(repl, config.secret.clone()));
    let refuse = tokio::spawn(replica::refuse_clients(pool, replica.clone()));
    info!(replication = %config.listen, pool = %config.serving, "standing by");
    let mut last_refusal = String::new();
    let active = loop {
        if let Some(lease) = Lease::try_take(&config.lock)? {
            replica.stop();
            let info = lease.read().map_err(std::io::Error::other)?;
            let mine = replica::held_epoch(&config.state_dir);
            match info.may_take_over(&config.listen, mine) {
                Ok(()) => break activate(config, lease, info)?,
                Err(why) => {
                    if why != last_refusal {
                        warn!(
                            "this standby holds the lease but is not in sync, so it does not take over: {why}. Bring back a manager that is (or, knowing what is lost, remove the lease file)"
                        );
                        last_refusal = why;
                    }
                    drop(lease);
                    replica.resume();
                    // Let a manager that is in sync take it meanwhile.
                    tokio::time::sleep(TRY_PERIOD * 5).await;
                    continue;
                }
            }
        }
        tokio::time::sleep(TRY_PERIOD).await;
    };
    serve.abort();
    refuse.abort();
    // The listeners close with their tasks; the pool's port is bound again by the server.
    let _ = serve.await;
    let _ = refuse.await;
    Ok(active)
}

/// Names this manager active at the next epoch, and keeps job ids clear
/// of any the former active gave after its last copied mark.
fn activate(config: &HaConfig, lease: Lease, old: LeaseInfo) -> std::io::Result<Active> {
    let info = LeaseInfo {
        epoch: old.epoch + 1,
        active: config.listen.clone(),
        serving: config.serving.clone(),
        in_sync: Vec::new(),
        renewed_unix: feed::unix_now(),
    };
    lease.write(&info)?;
    replica::note_epoch(&config.state_dir, info.epoch)?;
    let mut mark = crate::idmark::IdMark::open(&config.state_dir)?;
    if old.epoch > 0 {
        mark.keep_ahead(mark.floor() + crate::idmark::AHEAD)?;
    }
    info!(
        epoch = info.epoch,
        former = %old.active,
        "this manager is active: opening its state directory as a restart does"
    );
    Ok(Active { lease, info })
}

/// Starts replicating to the other managers: the journal's mirror.
pub fn start_feed(config: &HaConfig, active: Active) -> Arc<feed::Feed> {
    feed::Feed::start(
        feed::FeedConfig {
            state_dir: config.state_dir.clone(),
            peers: config.peers.clone(),
            secret: config.secret.clone(),
        },
        active.lease,
        active.info,
    )
}

#[cfg(test)]
#[path = "ha_tests.rs"]
mod tests;
