//! An application's event stream that keeps what is not yet wanted.
//!
//! The RMs' events arrive in any order (a reply may overtake a host
//! notification of an earlier request), so a test or benchmark waits for the
//! first item it wants and keeps the rest for later waits. Tests want a panic
//! naming what was missing; benchmarks want an error to report: each wait
//! comes in both forms (`take`, `try_take`).

use std::collections::VecDeque;
use std::time::Duration;

use carmi_api::client::{EventStream, Incoming};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, Failure, FailureCode, Reply};

/// How long a wait lasts unless the inbox was given another patience.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(20);

/// Why an awaited item did not come.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// Nothing wanted came within the patience.
    #[error("timed out after {patience:?} waiting for {what}; had {kept}")]
    TimedOut {
        /// What was awaited.
        what: String,
        /// The patience.
        patience: Duration,
        /// The items kept meanwhile (debug form), to show what came instead.
        kept: String,
    },
    /// The connection closed first.
    #[error("event stream ended while waiting for {what}; had {kept}")]
    Ended {
        /// What was awaited.
        what: String,
        /// The items kept meanwhile (debug form).
        kept: String,
    },
    /// A request failed: the one awaited, or (with [`Inbox::fail_fast`]) any.
    #[error("waiting for {what}: request {request} failed: {failure:?}")]
    Failed {
        /// What was awaited.
        what: String,
        /// The request that failed.
        request: RequestId,
        /// Its failure.
        failure: Failure,
    },
}

/// An application's event stream, keeping what arrives while waiting for
/// something else.
pub struct Inbox {
    events: EventStream,
    kept: VecDeque<Incoming>,
    patience: Duration,
    fail_fast: bool,
}

impl Inbox {
    /// Wraps `events`; waits last [`DEFAULT_PATIENCE`].
    pub fn new(events: EventStream) -> Inbox {
        Inbox {
            events,
            kept: VecDeque::new(),
            patience: DEFAULT_PATIENCE,
            fail_fast: false,
        }
    }

    /// The same inbox, whose waits last `patience`.
    pub fn with_patience(mut self, patience: Duration) -> Inbox {
        self.patience = patience;
        self
    }

    /// The same inbox, whose `try_` waits end with [`InboxError::Failed`] as
    /// soon as any request fails that the wait did not accept: a benchmark
    /// never waits for a failure, and should report one at once rather than
    /// time out.
    pub fn fail_fast(mut self) -> Inbox {
        self.fail_fast = true;
        self
    }

    /// The stream itself, for a caller that reads it directly (what is kept
    /// stays kept).
    pub fn events(&mut self) -> &mut EventStream {
        &mut self.events
    }

    /// The items kept so far, oldest first (to check that something did
    /// not arrive).
    pub fn kept(&self) -> impl Iterator<Item = &Incoming> {
        self.kept.iter()
    }

    /// The stream, for a caller that takes over from here; kept items are dropped.
    pub fn into_events(self) -> EventStream {
        self.events
    }

    /// The first item `want` accepts (a kept one first), waiting at most the
    /// inbox's patience.
    pub async fn try_take<T>(
        &mut self,
        what: &str,
        want: impl FnMut(&Incoming) -> Option<T>,
    ) -> Result<T, InboxError> {
        self.try_take_within(self.patience, what, want).await
    }

    /// [`Inbox::try_take`] with a patience of `limit` for this wait.
    pub async fn try_take_within<T>(
        &mut self,
        limit: Duration,
        what: &str,
        mut want: impl FnMut(&Incoming) -> Option<T>,
    ) -> Result<T, InboxError> {
        if let Some(i) = self.kept.iter().position(|x| want(x).is_some()) {
            let item = self.kept.remove(i).expect("position is in range");
            return Ok(want(&item).expect("accepted a moment ago"));
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.events.next()).await {
                Ok(Some(item)) => {
                    if let Some(t) = want(&item) {
                        return Ok(t);
                    }
                    if self.fail_fast
                        && let Incoming::Rm(Event::Failed { request, failure }) = &item
                    {
                        return Err(InboxError::Failed {
                            what: what.to_string(),
                            request: *request,
                            failure: failure.clone(),
                        });
                    }
                    self.kept.push_back(item);
                }
                Ok(None) => {
                    return Err(InboxError::Ended {
                        what: what.to_string(),
                        kept: format!("{:?}", self.kept),
                    });
                }
                Err(_) => {
                    return Err(InboxError::TimedOut {
                        what: what.to_string(),
                        patience: limit,
                        kept: format!("{:?}", self.kept),
                    });
                }
            }
        }
    }

    /// [`Inbox::try_take`], panicking with the reason.
    pub async fn take<T>(&mut self, what: &str, want: impl FnMut(&Incoming) -> Option<T>) -> T {
        self.try_take(what, want)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Inbox::try_take_within`], panicking with the reason.
    pub async fn take_within<T>(
        &mut self,
        limit: Duration,
        what: &str,
        want: impl FnMut(&Incoming) -> Option<T>,
    ) -> T {
        self.try_take_within(limit, what, want)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The reply of `request`, or [`InboxError::Failed`] if it failed.
    pub async fn try_done(&mut self, request: RequestId) -> Result<Reply, InboxError> {
        let what = format!("the reply to {request}");
        let answer = self
            .try_take(&what, |x| match x {
                Incoming::Rm(Event::Done { request: r, reply }) if *r == request => {
                    Some(Ok(reply.clone()))
                }
                Incoming::Rm(Event::Failed {
                    request: r,
                    failure,
                }) if *r == request => Some(Err(failure.clone())),
                _ => None,
            })
            .await?;
        answer.map_err(|failure| InboxError::Failed {
            what,
            request,
            failure,
        })
    }

    /// The reply of `request`; panics if it failed.
    pub async fn done(&mut self, request: RequestId) -> Reply {
        self.try_done(request)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The failure of `request` (its code and message); panics if it
    /// succeeded instead.
    pub async fn failed(&mut self, request: RequestId) -> (FailureCode, String) {
        let answer = self
            .take(&format!("the failure of {request}"), |x| match x {
                Incoming::Rm(Event::Done { request: r, reply }) if *r == request => {
                    Some(Err(reply.clone()))
                }
                Incoming::Rm(Event::Failed {
                    request: r,
                    failure,
                }) if *r == request => Some(Ok((failure.code, failure.message.clone()))),
                _ => None,
            })
            .await;
        answer.unwrap_or_else(|reply| {
            panic!("request {request} succeeded with {reply:?}, expected a failure")
        })
    }

    /// The hosts delivered for `request` until there are `count`, and the
    /// sizes of the groups they came in.
    pub async fn try_hosts_added(
        &mut self,
        request: RequestId,
        count: usize,
    ) -> Result<(Vec<HostId>, Vec<usize>), InboxError> {
        let mut hosts = Vec::new();
        let mut groups = Vec::new();
        while hosts.len() < count {
            let got = self
                .try_take(&format!("hosts for {request}"), |x| match x {
                    Incoming::Rm(Event::HostsAdded {
                        request: r, hosts, ..
                    }) if *r == request => Some(hosts.iter().map(|h| h.host).collect::<Vec<_>>()),
                    _ => None,
                })
                .await?;
            groups.push(got.len());
            hosts.extend(got);
        }
        Ok((hosts, groups))
    }

    /// [`Inbox::try_hosts_added`], panicking with the reason.
    pub async fn hosts_added(
        &mut self,
        request: RequestId,
        count: usize,
    ) -> (Vec<HostId>, Vec<usize>) {
        self.try_hosts_added(request, count)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The first event satisfying `want`: one already `seen` (taken out), or the
/// next to arrive within `limit`; the others that arrive meanwhile join
/// `seen`, so that a test can wait for one kind of event while the rest
/// (arriving in any order) stay available. Panics naming `what` on timeout
/// or when the stream ends.
pub async fn take_event<T>(
    events: &mut carmi_api::client::EventStream,
    seen: &mut std::collections::VecDeque<carmi_api::client::Incoming>,
    limit: Duration,
    what: &str,
    mut want: impl FnMut(&carmi_api::client::Incoming) -> Option<T>,
) -> T {
    if let Some(i) = seen.iter().position(|x| want(x).is_some()) {
        let item = seen.remove(i).expect("position is valid");
        return want(&item).expect("matched before");
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match tokio::time::timeout(left, events.next()).await {
            Ok(Some(item)) => {
                if let Some(t) = want(&item) {
                    return t;
                }
                seen.push_back(item);
            }
            Ok(None) => panic!("event stream ended while waiting for {what}; had {seen:?}"),
            Err(_) => panic!("timed out waiting for {what}; had {seen:?}"),
        }
    }
}
