//! Files the router task hands off: an ended job's files read from the
//! store of returned files and sent to an admin, and a job's checkpoint
//! copied into the executable store, both off the router's task.

use std::sync::Arc;

use bytes::Bytes;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, JobFiles};
use tokio::sync::mpsc;

use super::{Cmd, Outgoing};
use crate::returned::ReturnedStore;
use crate::store::ExeStore;

/// Reads the files of an ended job's master from the store and sends them
/// (or why they cannot be) on an admin connection, off the router task.
pub(super) async fn send(store: Arc<ReturnedStore>, tx: mpsc::Sender<Outgoing>, files: JobFiles) {
    let read = {
        let files = files.clone();
        tokio::task::spawn_blocking(move || store.read(&files)).await
    };
    let frame = match read {
        Ok(Ok(bytes)) => Outgoing::Frame(FromGlobal::Files(files), Bytes::from(bytes)),
        Ok(Err(message)) => Outgoing::Frame(
            FromGlobal::AdminFailed(carmi_api::msg::Failure {
                code: carmi_api::msg::FailureCode::Unavailable,
                message,
            }),
            Bytes::new(),
        ),
        Err(e) => Outgoing::Frame(
            FromGlobal::AdminFailed(carmi_api::msg::Failure {
                code: carmi_api::msg::FailureCode::Unavailable,
                message: format!("reading the files failed: {e}"),
            }),
            Bytes::new(),
        ),
    };
    let _ = tx.send(frame).await;
}

/// Copies the checkpoint `names` of the files master `files.process` sent
/// back into the executable store, drops what it sent from the store of
/// returned files, and tells the router (`Router::on_checkpoint_saved`).
pub(super) fn save_checkpoint(
    (returned, store): (Arc<ReturnedStore>, Arc<ExeStore>),
    to_router: mpsc::UnboundedSender<Cmd>,
    job: JobId,
    files: JobFiles,
    names: Vec<String>,
) {
    tokio::task::spawn_blocking(move || {
        let saved = crate::checkpoint::save(&returned, &store, &files, &names);
        returned.remove(files.process);
        let _ = to_router.send(Cmd::CheckpointSaved(job, saved));
    });
}
