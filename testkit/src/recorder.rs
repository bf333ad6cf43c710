//! An application's event stream as the end-to-end restart tests read it:
//! events are taken by what a test waits for, in any order, and every one
//! that arrived is logged, so that a test can check at its end that nothing
//! came twice.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use carmi_api::client::{EventStream, Incoming};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, FailureCode, Reply};

/// An event stream with the events not yet taken and the log of all.
pub struct Recorder {
    events: EventStream,
    kept: VecDeque<Incoming>,
    /// Every event that arrived, in order.
    pub log: Vec<Incoming>,
    patience: Duration,
}

impl Recorder {
    /// Reads `events`, waiting at most `patience` for each event taken.
    pub fn new(events: EventStream, patience: Duration) -> Recorder {
        Recorder {
            events,
            kept: VecDeque::new(),
            log: Vec::new(),
            patience,
        }
    }

    /// The first event `want` picks: one kept from before, or the next to
    /// arrive. Panics naming `what` on timeout or when the stream ends.
    pub async fn take<T>(&mut self, what: &str, mut want: impl FnMut(&Incoming) -> Option<T>) -> T {
        if let Some(i) = self.kept.iter().position(|x| want(x).is_some()) {
            let item = self.kept.remove(i).expect("position is valid");
            return want(&item).expect("matched before");
        }
        let deadline = Instant::now() + self.patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.events.next()).await {
                Ok(Some(item)) => {
                    self.log.push(item.clone());
                    if let Some(t) = want(&item) {
                        return t;
                    }
                    self.kept.push_back(item);
                }
                Ok(None) => panic!("the event stream ended waiting for {what}"),
                Err(_) => panic!("timed out waiting for {what}; had {:?}", self.kept),
            }
        }
    }

    /// The answer to `request`: its reply, or its failure.
    pub async fn answer(
        &mut self,
        what: &str,
        request: RequestId,
    ) -> Result<Reply, (FailureCode, String)> {
        self.take(what, |x| match x {
            Incoming::Rm(Event::Done { request: r, reply }) if *r == request => {
                Some(Ok(reply.clone()))
            }
            Incoming::Rm(Event::Failed {
                request: r,
                failure,
            }) if *r == request => Some(Err((failure.code, failure.message.clone()))),
            _ => None,
        })
        .await
    }

    /// The reply to `request`; panics if it failed.
    pub async fn done(&mut self, what: &str, request: RequestId) -> Reply {
        match self.answer(what, request).await {
            Ok(reply) => reply,
            Err(f) => panic!("{what} failed: {f:?}"),
        }
    }

    /// The next `HostsAdded` of `request`: its hosts and what remains.
    pub async fn added(&mut self, what: &str, request: RequestId) -> (Vec<HostId>, u32) {
        self.take(what, |x| match x {
            Incoming::Rm(Event::HostsAdded {
                request: r,
                hosts,
                remaining,
            }) if *r == request => Some((hosts.iter().map(|h| h.host).collect(), *remaining)),
            _ => None,
        })
        .await
    }
}
