//! The router task's dispatch of one command (a connection opened or
//! closed, a message, a stored upload, a staging report, a dashboard query)
//! to the router or the staging core.

use std::collections::HashMap;

use carmi_api::msg::Role;
use tokio::time::Instant;

use super::stager::on_stage_input;
use super::{Cmd, LinkTx, send_or_kick};
use crate::router::{LinkId, Router};
use crate::staging::Staging;

/// Hands one command to the router or the staging core.
pub(super) fn handle(
    cmd: Cmd,
    router: &mut Router,
    staging: &mut Staging,
    links: &mut HashMap<LinkId, LinkTx>,
    start: Instant,
) {
    staging.set_now(start.elapsed());
    let now = start.elapsed();
    match cmd {
        Cmd::Opened {
            link,
            role,
            identity,
            out,
        } => {
            links.insert(link, out);
            if let Role::Local { name } = &role {
                staging.on_local_opened(link, name.clone());
            }
            router.on_link_opened(link, role, now);
            if let Some(identity) = identity {
                router.on_link_identity(link, *identity);
            }
        }
        Cmd::Reply { link, msg } => send_or_kick(links, link, *msg),
        Cmd::AppIdentity(link, conn, verdict) => router.on_app_identity(link, conn, verdict),
        Cmd::Message { link, msg, at } => {
            router.on_decoded(link, *msg, at.saturating_duration_since(start))
        }
        Cmd::Stored(exe) => {
            staging.on_stored(&exe.sha256);
            router.on_executable_stored(&exe);
        }
        Cmd::Staging(input) => on_stage_input(staging, input),
        Cmd::CheckpointSaved(job, saved) => {
            for exe in saved.iter().flatten() {
                staging.on_stored(&exe.sha256);
            }
            router.on_checkpoint_saved(job, saved);
        }
        Cmd::Pilot(crate::pilots::PilotReport::Submitted { alloc, result }) => {
            router.on_pilot_submitted(alloc, result, now)
        }
        Cmd::Pilot(crate::pilots::PilotReport::States(states)) => {
            router.on_batch_states(&states, now)
        }
        Cmd::Dashboard(crate::dashboard::Query::Snapshot(tx)) => {
            let jobs = router.queue_status();
            let alloc = router.allocator();
            let waiting = (jobs.iter().filter(|j| j.state == "waiting"))
                .take(crate::dashboard::view::MAX_EXPLAINED)
                .map(|j| crate::dashboard::view::Waiting {
                    job: j.job,
                    classes: alloc.analyze(j.job),
                })
                .collect();
            let snapshot = crate::dashboard::Snapshot {
                machines: alloc.pool_status(),
                jobs,
                waiting,
            };
            let _ = tx.send(snapshot);
        }
        Cmd::Dashboard(crate::dashboard::Query::Ads(tx)) => {
            let _ = tx.send(router.allocator().machine_ads());
        }
        Cmd::Closed { link } => {
            links.remove(&link);
            staging.on_closed(link);
            router.on_link_closed(link, now);
        }
    }
}
