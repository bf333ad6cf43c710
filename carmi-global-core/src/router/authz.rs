//! Authorization of admin connections' requests: the identity each
//! connection proved with its token (set by the driver after the handshake),
//! the action each request is, and the job owners the table needs. A refused
//! request is answered with [`FailureCode::Denied`] naming the identity, the
//! action and the missing power, and logged; the connection stays open.
//!
//! A connection with no identity (a global RM run without a pool key, and
//! the router's own tests) keeps the old meaning of an admin connection: everything.

use std::collections::HashMap;

use carmi_proto::authz::{Action, Identity, check};
use carmi_proto::ids::{ConnId, JobId};
use carmi_proto::msg::{FailureCode, ToGlobal};
use tracing::warn;

use super::{LinkId, Router, variant_name};

/// What each connection's token lets it do.
#[derive(Default)]
pub(super) struct Access {
    /// What each admin connection's token lets it do.
    pub identities: HashMap<LinkId, Identity>,
    /// What the driver found of the token an application presented to
    /// start a new job (`AppAttach` without a job), by its local RM's link
    /// and connection, until that `AppAttach` takes it.
    pub app_identities: HashMap<(LinkId, ConnId), Result<Identity, String>>,
    /// Requests refused for their token's power since the start (the
    /// `carmi_token_denials_total` metric): a by-product of the decision.
    pub denied: u64,
}

impl Access {
    /// Forgets what connection `link` proved, and the verdicts on the
    /// applications behind it (it closed).
    pub fn forget_link(&mut self, link: LinkId) {
        self.identities.remove(&link);
        self.app_identities.retain(|&(l, _), _| l != link);
    }
}

impl Router {
    /// The identity that connection `link` proved in its handshake; called
    /// right after [`Router::on_link_opened`].
    pub fn on_link_identity(&mut self, link: LinkId, identity: Identity) {
        self.access.identities.insert(link, identity);
    }

    /// What the driver found of the token the application on `conn` at the
    /// local RM of `link` presented to start a new job: its identity, or why
    /// it is refused (forged, expired, revoked...). Called just before the
    /// `AppAttach` it came with.
    pub fn on_app_identity(
        &mut self,
        link: LinkId,
        conn: ConnId,
        verdict: Result<Identity, String>,
    ) {
        self.access.app_identities.insert((link, conn), verdict);
    }

    /// The owner of a new job started by the application on `conn` at
    /// machine `name`: the identity of its token, which must have power
    /// `submit`, or `None` in a pool without tokens (a machine link that
    /// proved no identity), where the machine stands for the owner.
    /// The refusal names the identity, the action and the missing power.
    pub(super) fn new_job_owner(
        &mut self,
        link: LinkId,
        name: &str,
        conn: ConnId,
    ) -> Result<Option<String>, String> {
        let verdict = self.access.app_identities.remove(&(link, conn));
        if !self.access.identities.contains_key(&link) {
            return Ok(None);
        }
        let refused = |why: String| {
            warn!(machine = name, %conn, "a new job refused: {why}");
            Err(format!("permission denied: {why}"))
        };
        match verdict {
            None => refused(format!(
                "an application at machine `{name}` may not start a job without a token: it needs a token with power submit (give it with CARMI_TOKEN)"
            )),
            Some(Err(e)) => refused(format!(
                "an application at machine `{name}` may not start a job: {e}"
            )),
            Some(Ok(who)) => match check(&who, &Action::StartJob) {
                Ok(()) => Ok(Some(who.name)),
                Err(refusal) => refused(refusal.to_string()),
            },
        }
    }

    /// Who submitted `job`, while the router remembers the job.
    pub(super) fn job_owner_of(&self, job: JobId) -> Option<String> {
        if let Some(s) = self.jobs.submitted.get(&job) {
            return Some(s.owner.clone());
        }
        // A cluster whose proc 0 left the queue: its other procs share the owner.
        if let Some(s) = self.jobs.submitted.values().find(|s| s.cluster == job) {
            return Some(s.owner.clone());
        }
        let queued = self.alloc.job_owner(job);
        if !queued.is_empty() {
            return Some(queued.to_string());
        }
        self.reports
            .history
            .select(Some(job))
            .pop()
            .map(|r| r.owner)
    }

    /// Requests refused so far because their connection's token lacked the
    /// power (for the global RM's metrics).
    pub fn denials(&self) -> u64 {
        self.access.denied
    }

    /// `msg` as the connection's identity may send it (a submit's owner and
    /// a hold's user become the identity), or `None` when it was refused
    /// and answered.
    pub(super) fn authorize(&mut self, link: LinkId, msg: ToGlobal) -> Option<ToGlobal> {
        let Some(who) = self.access.identities.get(&link) else {
            return Some(msg);
        };
        let owner;
        let action = match &msg {
            ToGlobal::Submit(_) => Action::Submit,
            ToGlobal::RemoveJob { job, .. } => {
                owner = self.job_owner_of(*job);
                manage("rm", *job, &owner)
            }
            ToGlobal::Hold { job, .. } => {
                owner = self.job_owner_of(*job);
                manage("hold", *job, &owner)
            }
            ToGlobal::Release { job, .. } => {
                owner = self.job_owner_of(*job);
                manage("release", *job, &owner)
            }
            ToGlobal::FetchFiles { job } => {
                owner = self.job_owner_of(*job);
                manage("fetch the files of", *job, &owner)
            }
            ToGlobal::Logs { job, .. } => {
                owner = self.job_owner_of(*job);
                manage("read the logs of", *job, &owner)
            }
            ToGlobal::Tokens(_) => Action::Tokens("manage"),
            ToGlobal::UserPrio(carmi_proto::msg::UserPrioRequest::List) => Action::Read("userprio"),
            ToGlobal::UserPrio(_) => Action::Admin("set a user's priority factor"),
            // Pilots run with daemon tokens the global RM makes: admins only.
            ToGlobal::Alloc(
                carmi_proto::msg::AllocRequest::List | carmi_proto::msg::AllocRequest::Info { .. },
            ) => Action::Read("alloc list"),
            ToGlobal::Alloc(_) => Action::Admin("manage allocation queues"),
            // Looking (status, q, history, events, analysis, ads) and
            // messages an admin link may not send at all (refused after this).
            other => Action::Read(variant_name(other)),
        };
        if let Err(refusal) = check(who, &action) {
            warn!(%link, identity = who.name, power = %who.power, %action, "refused: {refusal}");
            self.access.denied += 1;
            self.admin_fail(
                link,
                FailureCode::Denied,
                format!("permission denied: {refusal}"),
            );
            return None;
        }
        let name = who.name.clone();
        Some(match msg {
            ToGlobal::Submit(mut req) => {
                req.owner = name;
                ToGlobal::Submit(req)
            }
            ToGlobal::Hold {
                job,
                cluster,
                reason,
                user: _,
            } => ToGlobal::Hold {
                job,
                cluster,
                reason,
                user: name,
            },
            other => other,
        })
    }
}

fn manage<'a>(what: &'static str, job: JobId, owner: &'a Option<String>) -> Action<'a> {
    Action::Manage {
        what,
        job,
        owner: owner.as_deref(),
    }
}
