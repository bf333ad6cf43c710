//! An application's event stream that keeps what is not yet wanted, and a
//! job with hosts to run on (shared by both benchmarks).

use std::collections::VecDeque;

use carmi_api::client::{Carmi, ConnectOptions, EventStream, Incoming, connect};
use carmi_api::handshake::Secret;
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, Reply};

use super::{PATIENCE, Result};

/// An application's event stream, keeping what arrives while waiting for
/// something else (RM events come in any order).
pub(super) struct Inbox {
    pub(super) events: EventStream,
    kept: VecDeque<Incoming>,
}

impl Inbox {
    pub(super) fn new(events: EventStream) -> Inbox {
        Inbox {
            events,
            kept: VecDeque::new(),
        }
    }

    /// The first item `want` accepts, waiting at most `PATIENCE`.
    pub(super) async fn take<T>(
        &mut self,
        what: &str,
        mut want: impl FnMut(&Incoming) -> Option<T>,
    ) -> Result<T> {
        if let Some(i) = self.kept.iter().position(|x| want(x).is_some()) {
            let item = self.kept.remove(i).expect("position is in range");
            return Ok(want(&item).expect("accepted a moment ago"));
        }
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match tokio::time::timeout_at(deadline, self.events.next()).await {
                Ok(Some(item)) => {
                    if let Some(t) = want(&item) {
                        return Ok(t);
                    }
                    // A failed request is never what anyone waits for: report it at once.
                    if let Incoming::Rm(Event::Failed { request, failure }) = &item {
                        return Err(format!(
                            "waiting for {what}: request {request} failed: {failure:?}"
                        )
                        .into());
                    }
                    self.kept.push_back(item);
                }
                Ok(None) => return Err(format!("event stream ended waiting for {what}").into()),
                Err(_) => return Err(format!("timed out waiting for {what}").into()),
            }
        }
    }

    /// The `Done` reply of `request`.
    pub(super) async fn done(&mut self, request: RequestId) -> Result<Reply> {
        self.take(&format!("the reply to {request}"), |x| match x {
            Incoming::Rm(Event::Done { request: r, reply }) if *r == request => Some(reply.clone()),
            _ => None,
        })
        .await
    }

    /// Hosts delivered for an `addhosts` request, until there are `count`.
    pub(super) async fn hosts(&mut self, request: RequestId, count: usize) -> Result<Vec<HostId>> {
        let mut hosts = Vec::new();
        while hosts.len() < count {
            let got = self
                .take(&format!("hosts for {request}"), |x| match x {
                    Incoming::Rm(Event::HostsAdded {
                        request: r, hosts, ..
                    }) if *r == request => Some(hosts.iter().map(|h| h.host).collect::<Vec<_>>()),
                    _ => None,
                })
                .await?;
            hosts.extend(got);
        }
        Ok(hosts)
    }
}

/// A new job with `count` hosts of class `any` (every machine).
pub(super) async fn job_with_hosts(
    local: String,
    secret: Secret,
    count: usize,
) -> Result<(Carmi, Inbox, Vec<HostId>)> {
    let opts = ConnectOptions::new(local, secret);
    let (carmi, events) = connect(opts).await?;
    let mut inbox = Inbox::new(events);
    inbox.done(carmi.define_class("any", "true")).await?;
    let add = carmi.addhosts("any", count as u32, count as u32);
    let hosts = inbox.hosts(add, count).await?;
    Ok((carmi, inbox, hosts))
}
