//! The driver's inputs: each event from the global link, application
//! connections, launches, stores, exits and the owner handed to the core.
//!
//! Kept apart from `daemon.rs` (startup, the select loop, shutdown) so that
//! each file stays readable.

use std::net::IpAddr;

use bytes::Bytes;
use carmi_api::ids::{ConnId, JobId};
use carmi_api::jobcred::JobCredential;
use carmi_api::msg::{FromGlobal, FromLocal, FromLocalControl, OwnerEvent, ToGlobal};
use tokio::sync::oneshot;

use crate::input::GlobalTx;
use crate::jobcred::Holder;

use super::{Driver, Input, OwnerInput, stage_endpoint_for};

impl Driver {
    /// Hands one input to the core (or to the link, cache or policy it concerns).
    pub(super) fn handle(&mut self, input: Input) {
        // The core's deadlines (kill grace, heartbeats) are measured from here.
        self.core.on_time(self.now());
        match input {
            Input::GlobalUp { out, local_ip } => self.on_global_up(out, local_ip),
            Input::Global(msg, payload) => self.on_global(msg, payload),
            Input::GlobalDown { failed, rest } => {
                let unsent = self.global.down(failed, rest);
                tracing::info!(
                    unsent = unsent.len(),
                    "lost the global RM; processes keep running"
                );
                self.core.on_global_lost(unsent);
            }
            Input::AppConnected {
                conn,
                job,
                process,
                endpoint,
                token,
                out,
            } => {
                self.apps.insert(conn, out);
                (self.core).on_app_connected_with(conn, (job, process), endpoint, token);
            }
            Input::AppRequest { conn, id, body } => self.core.on_app_request(conn, id, body),
            Input::AppUpload {
                conn,
                executable,
                payload,
            } => self.core.on_app_upload(conn, executable, payload),
            Input::AppClosed { conn } => {
                self.apps.remove(&conn);
                self.creds.release(Holder::App(conn));
                self.core.on_app_closed(conn);
            }
            Input::Launched { process, result } => match result {
                Ok(group) => {
                    self.groups.0.insert(process, group);
                    self.core.on_launched(process, Ok(()));
                }
                Err(reason) => {
                    self.creds.release(Holder::Process(process));
                    tracing::warn!(%process, %reason, "process could not be started");
                    self.core.on_launched(process, Err(reason));
                }
            },
            Input::Stored { sha256, result } => {
                if let Err(reason) = &result {
                    tracing::warn!(%sha256, %reason, "staged executable rejected");
                }
                self.core.on_stored(&sha256, result);
            }
            Input::Fetched {
                sha256,
                source,
                result,
            } => self.core.on_fetched(&sha256, source, result),
            Input::Exited { process, report } => {
                self.groups.0.remove(&process);
                self.creds.release(Holder::Process(process));
                tracing::info!(%process, status = ?report.status, cpu_seconds = report.cpu_seconds, "process exited");
                let returned = report.returned;
                if !returned.files.is_empty() {
                    self.core
                        .on_master_files(process, returned.files, returned.bytes);
                }
                self.core
                    .on_exited_with(process, report.status, report.cpu_seconds, report.usage);
            }
            Input::LogRead { request, result } => self.core.on_log_read(request, result),
            Input::SuspendSlot(slot, reply) => {
                let _ = reply.send(self.core.suspend_slot(slot));
            }
            Input::ResumeSlot(slot, reply) => {
                let _ = reply.send(self.core.resume_slot(slot));
            }
            Input::Owner(event, reply) => self.on_owner(event, reply),
            Input::Metrics(reply) => {
                let owner = (self.policy.state(), self.policy.activity());
                let served = self.stager.served_bytes();
                let _ = reply.send(crate::metrics::render(&self.core.metrics(), owner, served));
            }
        }
    }
}

impl Driver {
    /// A session with the global RM is up: the core advertises the machine
    /// as it is now (its policy's values and expressions included).
    fn on_global_up(&mut self, out: GlobalTx, local_ip: Option<IpAddr>) {
        self.global.up(out);
        self.global_local_ip = local_ip;
        let values = self.policy.public_values(self.unix_epoch);
        let sampled = crate::machine::sample_dynamic(&self.work_dir);
        let ad = self
            .machine
            .advertise(&sampled, &values, &self.policy.expressions());
        self.core.on_global_connected(ad);
    }

    /// A message from the global RM: a job credential is kept here, the
    /// rest goes to the core; once registered, this machine's staging
    /// endpoint is told.
    fn on_global(&mut self, msg: FromGlobal, payload: Bytes) {
        if let FromGlobal::JobCredential { job, credential } = msg {
            match JobCredential::parse(&credential).filter(|c| c.job() == job) {
                Some(c) => self.creds.learn(c),
                None => {
                    tracing::warn!(%job, "the global RM sent a malformed job credential; ignored")
                }
            }
            return;
        }
        // A re-announcement after a reconnection attaches again; the
        // application already holds its credential then.
        if let FromGlobal::Attached { conn, job, .. } = &msg
            && !self.core.app_attached(*conn)
        {
            self.give_credential(*conn, *job);
        }
        let registered = matches!(msg, FromGlobal::Registered { .. });
        self.core.on_global(msg, payload);
        if registered && self.global.is_up() {
            let endpoint = self.stage_advertise.clone().unwrap_or_else(|| {
                stage_endpoint_for(self.stage_endpoint, self.global_local_ip).to_string()
            });
            self.global
                .send(ToGlobal::StageServe { endpoint }, Bytes::new());
        }
    }

    /// Owner activity reported by hand (a simulated owner): the policy is
    /// stepped on it and its signals sent before the answer, if one was asked for.
    fn on_owner(&mut self, event: OwnerEvent, reply: Option<oneshot::Sender<FromLocalControl>>) {
        let now = self.now();
        let applied = match &mut self.owner {
            OwnerInput::Simulated(o) => {
                o.apply(event, now);
                true
            }
            OwnerInput::Real(_) => {
                tracing::warn!(
                    ?event,
                    "owner event for a local RM that measures its real owner; ignored"
                );
                false
            }
        };
        if applied {
            tracing::info!(?event, "owner event");
            self.evaluate();
            // Signals go out before the answer does.
            self.flush();
        }
        if let Some(reply) = reply {
            let _ = reply.send(FromLocalControl::OwnerApplied {
                applied,
                state: self.policy.state().name().into(),
                activity: self.policy.activity().name().into(),
            });
        }
    }

    /// An application attached to `job` here: it holds the job's
    /// credential from now on, and is given it ahead of `Attached` (the core
    /// sends that after this) to prove to its peers, which know no other key.
    fn give_credential(&mut self, conn: ConnId, job: JobId) {
        let Some(out) = self.apps.get(&conn) else {
            return;
        };
        let credential = self.creds.hold(job, Holder::App(conn)).text();
        let msg = FromLocal::Credential { job, credential };
        // The kick ends the connection's task, which reports AppClosed.
        if !crate::apps::try_send(out, conn, msg)
            && let Some(out) = self.apps.remove(&conn)
        {
            out.kick.notify_one();
        }
    }
}
