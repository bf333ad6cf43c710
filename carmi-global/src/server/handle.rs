//! The router task's handling of one command: a connection opened or
//! closed, a message, a stored upload, a staging report go to the core as
//! its [`Input`]; an answer a connection made itself goes out; a dashboard
//! query is answered from the router.

use std::collections::HashMap;

use tokio::time::Instant;
use tracing::info;

use super::{Cmd, LinkTx, send_or_kick};
use crate::node::{GlobalCore, Input};
use crate::router::LinkId;

/// Hands one command to the core, or carries it out.
pub(super) fn handle(
    cmd: Cmd,
    core: &mut GlobalCore,
    links: &mut HashMap<LinkId, LinkTx>,
    start: Instant,
) {
    let now = start.elapsed();
    let input = match cmd {
        Cmd::Opened {
            link,
            role,
            identity,
            out,
        } => {
            links.insert(link, out);
            Input::Opened {
                link,
                role,
                identity,
            }
        }
        Cmd::Reply { link, msg } => return send_or_kick(core, links, link, *msg),
        Cmd::AppIdentity(link, conn, verdict) => Input::AppIdentity(link, conn, verdict),
        Cmd::Message { link, msg, at } => Input::Message {
            link,
            msg,
            at: at.saturating_duration_since(start),
        },
        Cmd::Alive { links, at } => Input::Alive {
            links,
            at: at.saturating_duration_since(start),
        },
        Cmd::Stored(exe) => Input::Stored(exe),
        Cmd::Staging(input) => Input::Stage(input),
        Cmd::CheckpointSaved(job, saved) => Input::CheckpointSaved(job, saved),
        Cmd::Pilot(crate::pilots::PilotReport::Submitted { alloc, result }) => {
            Input::PilotSubmitted { alloc, result }
        }
        Cmd::Pilot(crate::pilots::PilotReport::States(states)) => Input::BatchStates(states),
        Cmd::Dashboard(query) => return timed("Dashboard", || answer_dashboard(core, query)),
        Cmd::Closed { link } => {
            links.remove(&link);
            Input::Closed { link }
        }
    };
    timed(input.kind(), || {
        crate::metrics::Metrics::time(&crate::metrics::METRICS.core_step, || {
            core.on_input(input, now)
        })
    });
}

/// Runs one router step, logging it if it was slow.
fn timed(kind: &'static str, step: impl FnOnce()) {
    let t = std::time::Instant::now();
    step();
    let took = t.elapsed();
    if took >= SLOW_STEP {
        info!(
            input = kind,
            took_ms = took.as_millis() as u64,
            "a slow router step: every request that arrived meanwhile waited for it"
        );
    }
}

/// A router step at least this long is logged, with what it was: the
/// tail latency of every request is made of such steps.
const SLOW_STEP: std::time::Duration = std::time::Duration::from_millis(25);

/// How many waiting jobs a dashboard snapshot explains in a pool of
/// `slots` online slots: each is a pass over every slot on the router's
/// task, so a large pool gets fewer (at least one) rather than a router
/// step of seconds every few seconds (20 explained at 200,000 slots was
/// 4 million evaluations per snapshot).
fn explained(slots: usize) -> usize {
    const SLOT_VISITS: usize = 200_000;
    (SLOT_VISITS / slots.max(1)).clamp(1, crate::dashboard::view::MAX_EXPLAINED)
}

/// What `Status` and `Queue`, or `MachineAds`, would answer, for the dashboard.
fn answer_dashboard(core: &mut GlobalCore, query: crate::dashboard::Query) {
    let router = core.router();
    match query {
        crate::dashboard::Query::Snapshot(tx, full) => {
            let (jobs, light) = match full {
                true => (router.queue_status(), None),
                false => (Vec::new(), Some(router.allocator().job_ids())),
            };
            let alloc = router.allocator();
            let most = if full {
                explained(alloc.slot_counts().0)
            } else {
                0
            };
            let waiting = (jobs.iter().filter(|j| j.state == "waiting"))
                .take(most)
                .map(|j| crate::dashboard::view::Waiting {
                    job: j.job,
                    classes: alloc.analyze(j.job),
                })
                .collect();
            let snapshot = crate::dashboard::Snapshot {
                machines: alloc.pool_status(),
                jobs,
                waiting,
                counters: crate::metrics::CoreCounters {
                    denied_requests: router.denials(),
                },
                light,
            };
            let _ = tx.send(snapshot);
        }
        crate::dashboard::Query::Ads(tx) => {
            let _ = tx.send(router.allocator().machine_ads());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::explained;
    use crate::dashboard::view::MAX_EXPLAINED;

    #[test]
    fn a_large_pool_gets_fewer_waiting_jobs_explained_but_never_none() {
        assert_eq!(explained(0), MAX_EXPLAINED);
        assert_eq!(explained(4_000), MAX_EXPLAINED);
        assert_eq!(explained(40_000), 5);
        assert_eq!(explained(200_000), 1);
        assert_eq!(explained(10_000_000), 1);
    }
}
