//! What the driver hears about ([`Input`]) and the channel ends it holds for
//! the connections ([`AppTx`], [`GlobalTx`]), with [`stopped`].
//!
//! Kept below `daemon`, `apps`, `global`, `control` and `peer`, which all
//! use them, so that the modules form no circle: the connection tasks send
//! inputs without knowing the driver, and the driver uses the tasks.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use carmi_api::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
    ExecutableRef, FromGlobal, FromLocal, FromLocalControl, LogChunk, OwnerEvent, Request,
    StageSource, ToGlobal,
};
use carmi_local_core::stopping::StopInput;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::spawn::{ExitReport, ProcessGroup};

/// What the driver hears about.
#[derive(Debug)]
pub(crate) enum Input {
    /// A global connection is up; messages for it go into `out`.
    GlobalUp {
        out: GlobalTx,
        /// This machine's address on the connection to the global RM: the
        /// one other machines of the pool can reach.
        local_ip: Option<IpAddr>,
    },
    /// A message from the global RM.
    Global(FromGlobal, Bytes),
    /// The global connection is gone: `failed` could not be written, `rest` was never tried.
    GlobalDown {
        failed: Option<Outgoing>,
        rest: mpsc::Receiver<Outgoing>,
    },
    AppConnected {
        conn: ConnId,
        job: Option<JobId>,
        process: Option<ProcessId>,
        endpoint: String,
        /// The token it presented (for a new job, the global RM checks it).
        token: Option<String>,
        out: AppTx,
    },
    AppRequest {
        conn: ConnId,
        id: RequestId,
        body: Request,
    },
    AppUpload {
        conn: ConnId,
        executable: ExecutableRef,
        payload: Bytes,
    },
    AppClosed {
        conn: ConnId,
    },
    Launched {
        process: ProcessId,
        result: Result<ProcessGroup, String>,
    },
    Stored {
        sha256: String,
        result: Result<(), String>,
    },
    Fetched {
        sha256: String,
        source: StageSource,
        result: Result<(), String>,
    },
    Exited {
        process: ProcessId,
        report: ExitReport,
    },
    /// A read for `carmi logs` is done.
    LogRead {
        request: u64,
        result: Result<LogChunk, String>,
    },
    SuspendSlot(u32, oneshot::Sender<bool>),
    ResumeSlot(u32, oneshot::Sender<bool>),
    /// Owner activity; the answer (if asked for) once its effects are carried out.
    Owner(OwnerEvent, Option<oneshot::Sender<FromLocalControl>>),
    /// The metrics page is asked for (`crate::metrics`).
    Metrics(oneshot::Sender<String>),
}

impl Input {
    /// What the input is to the core's stopping sequence.
    pub(crate) fn stop_kind(&self) -> StopInput {
        match self {
            Input::Exited { .. } => StopInput::Exited,
            Input::Launched { .. } => StopInput::Launched,
            Input::GlobalUp { .. } => StopInput::GlobalUp,
            Input::GlobalDown { .. } => StopInput::GlobalDown,
            Input::Global(FromGlobal::Registered { .. }, _) => StopInput::Registered,
            _ => StopInput::Other,
        }
    }
}

/// A message for the global RM and its frame payload.
pub(crate) type Outgoing = (ToGlobal, Bytes);

/// The driver's end of a session: where messages go, and how to end it.
#[derive(Debug)]
pub(crate) struct GlobalTx {
    /// The session's outgoing queue, bounded.
    pub tx: mpsc::Sender<Outgoing>,
    /// Ends the session at once, even in the middle of a write that cannot
    /// complete; the session then reports `GlobalDown` as for any failure.
    pub kick: Arc<Notify>,
}

/// The driver's end of an application connection.
#[derive(Debug)]
pub(crate) struct AppTx {
    /// Its outgoing queue, bounded.
    pub tx: mpsc::Sender<FromLocal>,
    /// Ends the connection's task at once (it then reports `AppClosed`).
    pub kick: Arc<Notify>,
    /// Where the application connected from, for logs.
    pub peer: SocketAddr,
}

/// Resolves once `stop` turns true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard wait_for returns must not live across the caller's awaits.
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}
