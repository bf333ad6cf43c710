//! Authorization of admin connections' requests: the identity each
//! connection proved with its token (set by the driver after the handshake),
//! the action each request is, and the job owners the table needs. A refused
//! request is answered with [`FailureCode::Denied`] naming the identity, the
//! action and the missing power, and logged; the connection stays open.
//!
//! A connection with no identity (a global RM run without a pool key, and
//! the router's own tests) keeps the old meaning of an admin connection: everything.

use carmi_proto::authz::{Action, Identity, check};
use carmi_proto::ids::JobId;
use carmi_proto::msg::{FailureCode, ToGlobal};
use tracing::warn;

use super::{LinkId, Router, variant_name};

impl Router {
    /// The identity that connection `link` proved in its handshake; called
    /// right after [`Router::on_link_opened`].
    pub fn on_link_identity(&mut self, link: LinkId, identity: Identity) {
        self.identities.insert(link, identity);
    }

    /// Who submitted `job`, while the router remembers the job.
    pub(super) fn job_owner_of(&self, job: JobId) -> Option<String> {
        if let Some(s) = self.submitted.get(&job) {
            return Some(s.owner.clone());
        }
        let queued = self.alloc.job_owner(job);
        if !queued.is_empty() {
            return Some(queued.to_string());
        }
        self.history.select(Some(job)).pop().map(|r| r.owner)
    }

    /// `msg` as the connection's identity may send it (a submit's owner and
    /// a hold's user become the identity), or `None` when it was refused
    /// and answered.
    pub(super) fn authorize(&mut self, link: LinkId, msg: ToGlobal) -> Option<ToGlobal> {
        let Some(who) = self.identities.get(&link) else {
            return Some(msg);
        };
        let owner;
        let action = match &msg {
            ToGlobal::Submit(_) => Action::Submit,
            ToGlobal::RemoveJob { job } => {
                owner = self.job_owner_of(*job);
                manage("rm", *job, &owner)
            }
            ToGlobal::Hold { job, .. } => {
                owner = self.job_owner_of(*job);
                manage("hold", *job, &owner)
            }
            ToGlobal::Release { job } => {
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
                reason,
                user: _,
            } => ToGlobal::Hold {
                job,
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
