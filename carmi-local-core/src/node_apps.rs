//! The core's side of application connections: announced to the global
//! RM (again after each reconnection), their requests forwarded, or held
//! while it is away (failed if it stays away too long), their uploads kept
//! until it is back.
//!
//! Kept apart from `node.rs`, which holds the state and the global link, so
//! that each file stays readable.

use bytes::Bytes;
use carmi_proto::ids::{ConnId, JobId, ProcessId, RequestId};
use carmi_proto::msg::{Event, ExecutableRef, Failure, FailureCode, FromLocal, Request, ToGlobal};

use super::{App, Core, Effect, HOLD_WHILE_AWAY};

/// Most requests of one application kept as unanswered: a client that
/// never waits for its answers must not grow the local RM without bound
/// (beyond it, a request lost with the link is not told).
const MAX_UNANSWERED: usize = 4096;

impl Core {
    pub(super) fn announce(&mut self, conn: ConnId) {
        let Some(app) = self.apps.get_mut(&conn) else {
            return;
        };
        if app.announced {
            return;
        }
        app.announced = true;
        let (job, process) = match app.attached {
            Some((j, p)) => (Some(j), Some(p)),
            None => (app.declared_job, app.declared_process),
        };
        let endpoint = app.endpoint.clone();
        // A known job's process proved its credential; a new job's token is
        // the global RM's to check.
        let token = app.token.clone().filter(|_| job.is_none());
        let unanswered = std::mem::take(&mut app.unanswered);
        self.send(
            ToGlobal::AppAttach {
                conn,
                job,
                process,
                endpoint,
                token,
            },
            Bytes::new(),
        );
        // Forwarded on an earlier link and never answered: the global RM
        // says which it no longer knows.
        if !unanswered.is_empty() {
            self.send(
                ToGlobal::Unanswered {
                    conn,
                    requests: unanswered,
                },
                Bytes::new(),
            );
        }
        let held = self
            .apps
            .get_mut(&conn)
            .map(|app| std::mem::take(&mut app.held))
            .unwrap_or_default();
        for (id, body, _) in held {
            self.forward(conn, id, body);
        }
    }

    /// Forwards a request on the registered link, remembering it as unanswered.
    fn forward(&mut self, conn: ConnId, id: RequestId, body: Request) {
        if let Some(app) = self.apps.get_mut(&conn)
            && app.unanswered.len() < MAX_UNANSWERED
        {
            app.unanswered.push(id);
        }
        self.send(ToGlobal::Forward { conn, id, body }, Bytes::new());
    }

    /// Fails the requests held longer than [`HOLD_WHILE_AWAY`] (the global
    /// RM has not come back for them).
    pub(super) fn fail_held_too_long(&mut self) {
        let now = self.time.now;
        let mut expired = Vec::new();
        for (&conn, app) in &mut self.apps {
            app.held.retain(|&(id, _, since)| {
                let keep = now - since < HOLD_WHILE_AWAY;
                if !keep {
                    expired.push((conn, id));
                }
                keep
            });
        }
        for (conn, id) in expired {
            tracing::warn!(%conn, request = %id, "no global RM for {HOLD_WHILE_AWAY} s: failing a held request");
            let why = format!(
                "the local RM has not been connected to the global RM for {HOLD_WHILE_AWAY} s; retry later"
            );
            self.fail_unavailable(conn, id, why);
        }
    }

    /// When the oldest held request runs out of patience, if any is held.
    pub(super) fn held_deadline(&self) -> Option<f64> {
        self.apps
            .values()
            .filter_map(|app| {
                app.held
                    .first()
                    .map(|&(_, _, since)| since + HOLD_WHILE_AWAY)
            })
            .min_by(f64::total_cmp)
    }

    /// Whether the application on `conn` has been told its ids already
    /// (so a later `Attached` is a re-announcement after a reconnection).
    pub fn app_attached(&self, conn: ConnId) -> bool {
        self.apps
            .get(&conn)
            .is_some_and(|app| app.attached.is_some())
    }

    pub(super) fn on_attached(&mut self, conn: ConnId, job: JobId, process: ProcessId) {
        let Some(app) = self.apps.get_mut(&conn) else {
            tracing::debug!(%conn, "Attached for a connection that is gone");
            return;
        };
        match app.attached {
            None => {
                app.attached = Some((job, process));
                self.send_app(conn, FromLocal::Attached { job, process });
            }
            // A re-announcement after reconnecting: the application already knows who it is.
            Some(ids) if ids == (job, process) => {}
            Some((old_job, old_process)) => {
                tracing::warn!(
                    %conn, %old_job, %old_process, %job, %process,
                    "the global RM re-attached a connection under other ids"
                );
                app.attached = Some((job, process));
            }
        }
    }

    /// An application finished its handshake on connection `conn`, without
    /// a token.
    pub fn on_app_connected(
        &mut self,
        conn: ConnId,
        job: Option<JobId>,
        process: Option<ProcessId>,
        endpoint: String,
    ) {
        self.on_app_connected_with(conn, (job, process), endpoint, None);
    }

    /// An application finished its handshake on connection `conn`,
    /// declaring `job` and `process`, presenting `token` (passed on to the
    /// global RM when it starts a new job, which needs power `submit`).
    pub fn on_app_connected_with(
        &mut self,
        conn: ConnId,
        (job, process): (Option<JobId>, Option<ProcessId>),
        endpoint: String,
        token: Option<String>,
    ) {
        self.apps.insert(
            conn,
            App {
                declared_job: job,
                declared_process: process,
                endpoint,
                token: token.filter(|_| job.is_none()),
                attached: None,
                announced: false,
                unanswered: Vec::new(),
                held: Vec::new(),
            },
        );
        if self.is_registered() {
            self.announce(conn);
        }
    }

    /// A request from an application.
    pub fn on_app_request(&mut self, conn: ConnId, id: RequestId, body: Request) {
        let Some(app) = self.apps.get(&conn) else {
            return;
        };
        if self.is_registered() && app.announced {
            self.forward(conn, id, body);
        } else if app.held.len() < MAX_UNANSWERED {
            let now = self.time.now;
            if let Some(app) = self.apps.get_mut(&conn) {
                app.held.push((id, body, now));
            }
        } else {
            let why = format!(
                "the local RM is not connected to the global RM and already holds {MAX_UNANSWERED} requests of this application; retry later"
            );
            self.fail_unavailable(conn, id, why);
        }
    }

    fn fail_unavailable(&mut self, conn: ConnId, request: RequestId, message: String) {
        if let Some(app) = self.apps.get_mut(&conn) {
            app.unanswered.retain(|&r| r != request);
        }
        let failure = Failure {
            code: FailureCode::Unavailable,
            message,
        };
        self.send_app(conn, FromLocal::Event(Event::Failed { request, failure }));
    }

    /// An application uploaded an executable (bytes in `payload`, passed on verbatim).
    pub fn on_app_upload(&mut self, conn: ConnId, executable: ExecutableRef, payload: Bytes) {
        if !self.apps.contains_key(&conn) {
            return;
        }
        self.counters.uploaded_bytes += payload.len() as u64;
        self.send_or_keep(ToGlobal::Upload { executable }, payload);
    }

    /// The job of the application on `conn` ended: its unanswered requests
    /// fail with `reason`, it is told, and its connection is closed, so that
    /// it never waits for answers that cannot come.
    pub(super) fn on_job_gone(&mut self, conn: ConnId, job: JobId, reason: String) {
        tracing::info!(%conn, %job, "{reason}; closing the application's connection");
        let last = FromLocal::JobEnded {
            job,
            reason: reason.clone(),
        };
        self.end_app(conn, reason, last);
    }

    /// The global RM refused the application on `conn` (a new job without
    /// a token that may submit): it is told why, and only its connection
    /// is closed.
    pub(super) fn on_attach_refused(&mut self, conn: ConnId, reason: String) {
        tracing::warn!(%conn, "the global RM refused an application: {reason}");
        let last = FromLocal::Refused {
            reason: reason.clone(),
        };
        self.end_app(conn, reason, last);
    }

    /// Fails the unanswered and held requests of the application on `conn`
    /// with `reason`, sends it `last` and closes its connection.
    fn end_app(&mut self, conn: ConnId, reason: String, last: FromLocal) {
        let Some(app) = self.apps.remove(&conn) else {
            tracing::debug!(%conn, "{reason}: for a connection that is gone");
            return;
        };
        let held = app.held.iter().map(|&(id, _, _)| id);
        for request in app.unanswered.iter().copied().chain(held) {
            let failure = Failure {
                code: FailureCode::Unavailable,
                message: reason.clone(),
            };
            self.send_app(conn, FromLocal::Event(Event::Failed { request, failure }));
        }
        self.send_app(conn, last);
        self.effects.push(Effect::CloseApp(conn));
    }

    /// An application connection closed.
    pub fn on_app_closed(&mut self, conn: ConnId) {
        let announced = self.apps.remove(&conn).is_some_and(|app| app.announced);
        if announced && self.is_registered() {
            self.send(ToGlobal::AppDetach { conn }, Bytes::new());
        }
    }
}
