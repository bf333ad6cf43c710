//! The router task: it owns the global RM's core ([`GlobalCore`]), feeds it
//! one command at a time (a round of what is already waiting at once, so
//! that their journal records share one fsync) and carries out what it
//! decides: records first, then messages, closes, kicks and work on the
//! stores and the batch system.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::warn;

use super::handle::handle;
use super::{Cmd, LinkTx, Outgoing, files, off_worker, send_or_kick};
use crate::journal::Journal;
use crate::node::{BATCH, Effect, GlobalCore};
use crate::returned::ReturnedStore;
use crate::router::{LinkId, Output};
use crate::store::ExeStore;

/// Owns the core: one input at a time, what it decides carried out after
/// each round, one timer at its next deadline.
pub(super) async fn router_task(
    mut core: GlobalCore,
    mut kit: Kit,
    (mut journal, mut mark): (Journal, crate::idmark::IdMark),
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    mut stop: watch::Receiver<bool>,
    _done: mpsc::Sender<()>,
) {
    let start = Instant::now();
    let mut links: HashMap<LinkId, LinkTx> = HashMap::new();
    loop {
        // A deadline beyond what the clock can express is no deadline.
        let deadline = core.next_deadline().and_then(|d| start.checked_add(d));
        tokio::select! {
            cmd = cmds.recv() => {
                let Some(cmd) = cmd else { break };
                handle(cmd, &mut core, &mut links, start);
                // What else waits joins the round (group commit, see `node`).
                for _ in 0..BATCH {
                    let Ok(cmd) = cmds.try_recv() else { break };
                    handle(cmd, &mut core, &mut links, start);
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(start)), if deadline.is_some() => {
                // What arrived before the deadline counts first: heartbeats
                // that waited in the inbox while this task was busy are not silence.
                let waiting = cmds.len();
                for _ in 0..waiting {
                    match cmds.try_recv() {
                        Ok(cmd) => handle(cmd, &mut core, &mut links, start),
                        Err(_) => break,
                    }
                }
                let tick = || core.on_tick(start.elapsed());
                crate::metrics::Metrics::time(&crate::metrics::METRICS.core_step, tick);
            }
            _ = stop.changed() => break,
        }
        let batch = core.take_batch();
        if let Err(e) = mark.keep_ahead(batch.next_job_id) {
            tracing::error!("cannot write the job-id mark: {e}");
        }
        write_journal(&mut journal, &batch.records);
        for effect in batch.effects {
            carry_out(effect, &mut core, &mut links, &mut kit);
        }
        // Carrying the batch out found these peers not reading.
        for link in core.take_kicks() {
            carry_out(Effect::Kick { link }, &mut core, &mut links, &mut kit);
        }
    }
}

/// What the router task carries effects out with: the master files kept,
/// the executable store, the key that signs job credentials, the batch
/// system, and the way back to the task for what finishes later.
pub(super) struct Kit {
    pub(super) returned: Arc<ReturnedStore>,
    pub(super) store: Arc<ExeStore>,
    pub(super) job_key: carmi_api::jobcred::JobKey,
    pub(super) pilots: crate::pilots::PilotDriver,
    pub(super) to_router: mpsc::UnboundedSender<Cmd>,
}

/// Carries out one of the core's effects.
fn carry_out(
    effect: Effect,
    core: &mut GlobalCore,
    links: &mut HashMap<LinkId, LinkTx>,
    kit: &mut Kit,
) {
    let out = match effect {
        Effect::Credential { link, job } => {
            let msg = crate::jobcred::message(&kit.job_key, job);
            return send_or_kick(core, links, link, msg);
        }
        Effect::Kick { link } => {
            if let Some(out) = links.remove(&link) {
                warn!(
                    %link,
                    queued = out.tx.max_capacity(),
                    "disconnecting: the peer stopped reading and its outgoing queue is full"
                );
                out.kick.notify_one();
            }
            return;
        }
        Effect::Router(out) => out,
    };
    match out {
        Output::Send { link, msg } => send_or_kick(core, links, link, msg),
        Output::Close { link, reason } => {
            if let Some(out) = links.remove(&link)
                && out.tx.try_send(Outgoing::Close(reason)).is_err()
            {
                out.kick.notify_one();
            }
        }
        Output::Journal(_) => unreachable!("records travel in the batch"),
        Output::DropFiles { process } => {
            let store = kit.returned.clone();
            tokio::task::spawn_blocking(move || store.remove(process));
        }
        Output::Pilot(cmd) => {
            let tx = kit.to_router.clone();
            kit.pilots.carry_out(cmd, move |r| {
                let _ = tx.send(Cmd::Pilot(r));
            });
        }
        Output::SendFiles { link, files } => {
            if let Some(out) = links.get(&link) {
                tokio::spawn(files::send(kit.returned.clone(), out.tx.clone(), files));
            }
        }
        Output::DropStored { sha256 } => {
            let store = kit.store.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = store.remove(&sha256) {
                    warn!("removing a stored file no job refers to failed: {e}");
                }
            });
        }
        Output::SaveCheckpoint { job, files, names } => {
            let stores = (kit.returned.clone(), kit.store.clone());
            files::save_checkpoint(stores, kit.to_router.clone(), job, files, names);
        }
    }
}

/// Appends `records` (if any) with one fsync, a short blocking write on the
/// router's task on purpose: nothing after them may go out before they are
/// on disk.
fn write_journal(journal: &mut Journal, records: &[crate::journal::Record]) {
    if records.is_empty() {
        return;
    }
    let result = off_worker(|| journal.append(records));
    if let Err(e) = result {
        tracing::error!(journal = %journal.path().display(), "cannot write the journal: {e}");
    }
}
