//! A job with hosts to run on (shared by both benchmarks), waited for through
//! the test kit's [`Inbox`].

use carmi_api::client::{Carmi, ConnectOptions, connect};
use carmi_api::handshake::Secret;
use carmi_api::ids::HostId;
use carmi_testkit::Inbox;

use super::{PATIENCE, Result};

/// An inbox for a benchmark: patient for [`PATIENCE`], and reporting a failed
/// request at once (a benchmark never waits for one).
pub(super) fn bench_inbox(events: carmi_api::client::EventStream) -> Inbox {
    Inbox::new(events).with_patience(PATIENCE).fail_fast()
}

/// A new job with `count` hosts of class `any` (every machine).
pub(super) async fn job_with_hosts(
    local: String,
    secret: Secret,
    count: usize,
) -> Result<(Carmi, Inbox, Vec<HostId>)> {
    job_with_hosts_plain(local, secret, count, false).await
}

/// [`job_with_hosts`], its direct connections in clear when `plain`.
pub(super) async fn job_with_hosts_plain(
    local: String,
    secret: Secret,
    count: usize,
    plain: bool,
) -> Result<(Carmi, Inbox, Vec<HostId>)> {
    let mut opts = ConnectOptions::new(local, secret);
    opts.plain_peers = plain;
    let (carmi, events) = connect(opts).await?;
    let mut inbox = bench_inbox(events);
    inbox.try_done(carmi.define_class("any", "true")).await?;
    let add = carmi.addhosts("any", count as u32, count as u32);
    let (hosts, _) = inbox.try_hosts_added(add, count).await?;
    Ok((carmi, inbox, hosts))
}
