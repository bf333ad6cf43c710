//! Who fetches an executable from whom: the staging tree.
//!
//! A local RM that lacks an executable sends `Fetch`; [`Staging`] answers
//! with a source: a peer that holds it, or is receiving it (copies are
//! pipelined, see `carmi_api::stage`), or else the global RM's own store.
//! Each source serves at most `fanout` fetches at once, so the holders of an
//! executable grow as a tree rooted at the store instead of a star, and the
//! global RM sends a few copies however many machines need it. A fetch that
//! fails (a corrupt copy, a peer gone or stalled) is reported with
//! `Fetched`: the failed source is no longer offered for that executable and
//! the fetcher falls back to the store. A fetch not reported within
//! [`StagingConfig::fetch_timeout`] gives its source's slot back (a machine
//! that fetches and never reports must not hold the store's fan-out, and
//! with it every new executable's staging, for ever); it is forgotten, and
//! its late `Fetched` ignored.
//!
//! A pure state machine (no I/O, no clock): the driver calls the `on_*`
//! methods in the order things happen and sends what [`Staging::take_outputs`]
//! returns.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use carmi_proto::msg::{FromGlobal, StageSource, StageStats};

use crate::router::LinkId;

/// Settings.
#[derive(Clone, Debug)]
pub struct StagingConfig {
    /// Fetches one source (a peer or the store) serves at once. With a
    /// link per machine, 1 makes a chain: every copy at the full link rate,
    /// each machine adding one chunk's link time (a few ms); 2 a binary
    /// tree: every copy below the store at half the rate, the depth
    /// log2 of the machines. The chain wins while the machines times a
    /// chunk's time stays below the transfer time of one copy (64 machines
    /// and 4-12 MiB on a 2 MB/s link: 1.1-1.2x the time of one machine against
    /// 2x); for thousands of machines, or small executables on fast links,
    /// choose 2.
    pub fanout: u32,
    /// How long a fetch may stay unreported before its source's slot is
    /// given back ([`DEFAULT_FETCH_TIMEOUT`]).
    pub fetch_timeout: Duration,
}

/// A fetch's time to report by default: 10 minutes, what 256 MiB (the
/// most a job's inputs may weigh) take on a link of under 0.5 MB/s.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(600);

impl Default for StagingConfig {
    fn default() -> Self {
        StagingConfig {
            fanout: 1,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }
}

/// A source, by link (`None`: the store).
type Src = Option<LinkId>;

/// A local RM link that may serve.
#[derive(Clone, Debug)]
struct Peer {
    name: String,
    endpoint: Option<String>,
}

/// A staging message of a local RM (or the store serving a copy), as the
/// driver received it: what [`Staging::on_input`] takes.
#[derive(Clone, Debug, PartialEq)]
pub enum StageInput {
    /// `link` lacks executable `sha256`.
    Fetch {
        /// The local RM.
        link: LinkId,
        /// The executable.
        sha256: String,
    },
    /// `link` serves its peers at `endpoint`.
    Serve {
        /// The local RM.
        link: LinkId,
        /// Where its peers reach it.
        endpoint: String,
    },
    /// `link`'s fetch of `sha256` ended, with `error` if it failed.
    Fetched {
        /// The local RM.
        link: LinkId,
        /// The executable.
        sha256: String,
        /// Why it failed.
        error: Option<String>,
    },
    /// `link` asks for the staging statistics.
    Stats {
        /// The asker.
        link: LinkId,
    },
    /// The store began serving a copy.
    GlobalSend,
}

/// The staging state of the global RM.
#[derive(Debug, Default)]
pub struct Staging {
    config: StagingConfig,
    peers: HashMap<LinkId, Peer>,
    /// Executables in the store.
    stored: HashSet<String>,
    /// sha256 -> links that hold it or are receiving it, oldest first.
    holders: HashMap<String, Vec<LinkId>>,
    /// Fetches being served, per source.
    serving: HashMap<Src, u32>,
    /// (fetcher, sha256) -> its source and when it was directed.
    inflight: HashMap<(LinkId, String), (Src, Duration)>,
    /// The driver's clock, as of its last input.
    now: Duration,
    /// Fetches waiting for a source with room, in arrival order.
    queued: VecDeque<(LinkId, String)>,
    stats: StageStats,
    out: Vec<(LinkId, FromGlobal)>,
}

impl Staging {
    /// An empty staging state.
    pub fn new(config: StagingConfig) -> Staging {
        Staging {
            config,
            ..Staging::default()
        }
    }

    /// Hands a staging message to the method that handles it.
    pub fn on_input(&mut self, input: StageInput) {
        match input {
            StageInput::Fetch { link, sha256 } => self.on_fetch(link, sha256),
            StageInput::Serve { link, endpoint } => self.on_endpoint(link, endpoint),
            StageInput::Fetched {
                link,
                sha256,
                error,
            } => self.on_fetched(link, sha256, error),
            StageInput::Stats { link } => self.on_stats_request(link),
            StageInput::GlobalSend => self.on_global_send(),
        }
    }

    /// The time of the inputs that follow (the driver's monotonic clock).
    pub fn set_now(&mut self, now: Duration) {
        self.now = self.now.max(now);
    }

    /// When [`Staging::on_tick`] must next be called, if ever.
    pub fn next_deadline(&self) -> Option<Duration> {
        let oldest = self.inflight.values().map(|(_, at)| *at).min()?;
        Some(oldest + self.config.fetch_timeout)
    }

    /// Gives back the slots of fetches unreported for longer than the
    /// fetch timeout at `now`.
    pub fn on_tick(&mut self, now: Duration) {
        self.set_now(now);
        let limit = self.config.fetch_timeout;
        let stale: Vec<(LinkId, String)> = self
            .inflight
            .iter()
            .filter(|(_, (_, at))| self.now.saturating_sub(*at) >= limit)
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            let Some((src, _)) = self.inflight.remove(&key) else {
                continue;
            };
            let name = self.peers.get(&key.0).map_or("?", |p| p.name.as_str());
            tracing::warn!(link = %key.0, machine = name, sha256 = %key.1, "a fetch was not reported within {} s: its source's slot is given back", limit.as_secs());
            self.release(src);
            // Not a holder: nothing says its copy is whole.
            if let Some(h) = self.holders.get_mut(&key.1) {
                h.retain(|l| *l != key.0);
            }
            self.holders.retain(|_, h| !h.is_empty());
            self.stats.failed += 1;
        }
        self.dispatch();
    }

    /// A local RM connected (as machine `name`).
    pub fn on_local_opened(&mut self, link: LinkId, name: String) {
        self.peers.insert(
            link,
            Peer {
                name,
                endpoint: None,
            },
        );
    }

    /// A local RM says where it serves its cache.
    pub fn on_endpoint(&mut self, link: LinkId, endpoint: String) {
        if let Some(p) = self.peers.get_mut(&link) {
            p.endpoint = Some(endpoint);
        }
    }

    /// An executable is in the store.
    pub fn on_stored(&mut self, sha256: &str) {
        self.stored.insert(sha256.to_string());
        self.dispatch();
    }

    /// The store no longer holds `sha256` (removed: no live job refers to
    /// it): fetches are directed to machines that hold it, if any.
    pub fn on_dropped(&mut self, sha256: &str) {
        self.stored.remove(sha256);
    }

    /// The global RM sent a copy from its store (counted where it happens).
    pub fn on_global_send(&mut self) {
        self.stats.global_sends += 1;
    }

    /// A link closed: it holds nothing any more, serves nothing, waits for nothing.
    pub fn on_closed(&mut self, link: LinkId) {
        self.peers.remove(&link);
        for h in self.holders.values_mut() {
            h.retain(|l| *l != link);
        }
        self.holders.retain(|_, h| !h.is_empty());
        let mine: Vec<(LinkId, String)> = self
            .inflight
            .keys()
            .filter(|(l, _)| *l == link)
            .cloned()
            .collect();
        for key in mine {
            if let Some((src, _)) = self.inflight.remove(&key) {
                self.release(src);
            }
        }
        // Its fetchers notice on their own connections and report `Fetched`.
        self.serving.remove(&Some(link));
        self.queued.retain(|(l, _)| *l != link);
        self.dispatch();
    }

    /// `Fetch` from a local RM.
    pub fn on_fetch(&mut self, link: LinkId, sha256: String) {
        if self.inflight.contains_key(&(link, sha256.clone())) {
            tracing::debug!(%link, %sha256, "fetch already being served; ignored");
            return;
        }
        if !self.stored.contains(&sha256) && !self.holders.contains_key(&sha256) {
            self.out.push((link, FromGlobal::NoExecutable { sha256 }));
            return;
        }
        match self.pick(link, &sha256, true) {
            Some(src) => self.direct(link, sha256, src),
            None => self.queued.push_back((link, sha256)),
        }
    }

    /// `Fetched` from a local RM: `source_link` is the peer it named (`None`
    /// for the store), `error` why the copy failed.
    pub fn on_fetched(&mut self, link: LinkId, sha256: String, error: Option<String>) {
        let Some((src, _)) = self.inflight.remove(&(link, sha256.clone())) else {
            tracing::debug!(%link, %sha256, "Fetched for a fetch not directed here; ignored");
            return;
        };
        self.release(src);
        match error {
            None => {
                self.stats.completed += 1;
                self.add_holder(link, &sha256);
            }
            Some(reason) => {
                self.stats.failed += 1;
                let from = match src {
                    Some(l) => self.peers.get(&l).map_or("a peer that left", |p| &p.name),
                    None => "the store",
                };
                tracing::warn!(%link, %sha256, from, %reason, "a staged copy failed; fetching it again from the store");
                if let Some(h) = self.holders.get_mut(&sha256) {
                    // Neither the fetcher (incomplete) nor a source that
                    // failed it is offered again for this executable; a
                    // peer whose own fetch then completes is added back.
                    h.retain(|l| *l != link && Some(*l) != src);
                }
                if self.stored.contains(&sha256) && src.is_some() {
                    // The store is the fallback: not subject to the fan-out.
                    self.direct(link, sha256, None);
                } else {
                    // The store itself failed (or never had it): any other holder.
                    match self.pick(link, &sha256, false) {
                        Some(s) => self.direct(link, sha256, s),
                        None => self.out.push((link, FromGlobal::NoExecutable { sha256 })),
                    }
                }
            }
        }
        self.dispatch();
    }

    /// An admin asks for the counters.
    pub fn on_stats_request(&mut self, link: LinkId) {
        self.out.push((link, FromGlobal::StageStats(self.stats())));
    }

    /// The counters.
    pub fn stats(&self) -> StageStats {
        self.stats.clone()
    }

    /// Messages to send, in order.
    pub fn take_outputs(&mut self) -> Vec<(LinkId, FromGlobal)> {
        std::mem::take(&mut self.out)
    }

    /// Invariants, for tests.
    pub fn sanity_check(&self) {
        let mut counted: HashMap<Src, u32> = HashMap::new();
        for (src, _) in self.inflight.values() {
            *counted.entry(*src).or_default() += 1;
        }
        for (src, n) in &counted {
            if src.is_none_or(|l| self.peers.contains_key(&l)) {
                assert_eq!(
                    self.serving.get(src).copied().unwrap_or(0),
                    *n,
                    "serving count of {src:?}"
                );
            }
        }
        for (src, n) in &self.serving {
            if *n > 0 && src.is_some() {
                assert!(
                    counted.contains_key(src),
                    "source {src:?} serves nothing in flight"
                );
            }
        }
    }

    /// The oldest source with room: the store first, then holders in the
    /// order they got it, so the copies spread breadth first (a tree of
    /// depth log_fanout of the machines, not a chain).
    fn pick(&self, fetcher: LinkId, sha256: &str, store: bool) -> Option<Src> {
        let fanout = self.config.fanout.max(1);
        let busy = |s: &Src| self.serving.get(s).copied().unwrap_or(0);
        if store && self.stored.contains(sha256) && busy(&None) < fanout {
            return Some(None);
        }
        self.holders
            .get(sha256)
            .into_iter()
            .flatten()
            .filter(|l| **l != fetcher)
            .filter(|l| self.peers.get(l).is_some_and(|p| p.endpoint.is_some()))
            .map(|l| Some(*l))
            .find(|s| busy(s) < fanout)
    }

    fn direct(&mut self, link: LinkId, sha256: String, src: Src) {
        let source = match src {
            None => {
                self.stats.directed_global += 1;
                StageSource::Global
            }
            Some(l) => {
                self.stats.directed_peer += 1;
                let p = &self.peers[&l];
                StageSource::Peer {
                    name: p.name.clone(),
                    endpoint: p.endpoint.clone().expect("picked peers have an endpoint"),
                }
            }
        };
        *self.serving.entry(src).or_default() += 1;
        self.inflight
            .insert((link, sha256.clone()), (src, self.now));
        // Receiving is enough to serve: copies are pipelined.
        self.add_holder(link, &sha256);
        self.out
            .push((link, FromGlobal::FetchFrom { sha256, source }));
    }

    fn add_holder(&mut self, link: LinkId, sha256: &str) {
        if !self.peers.contains_key(&link) {
            return;
        }
        let h = self.holders.entry(sha256.to_string()).or_default();
        if !h.contains(&link) {
            h.push(link);
        }
    }

    fn release(&mut self, src: Src) {
        if let Some(n) = self.serving.get_mut(&src) {
            *n = n.saturating_sub(1);
        }
    }

    /// Directs queued fetches that now have a source.
    fn dispatch(&mut self) {
        let mut waiting = std::mem::take(&mut self.queued);
        while let Some((link, sha256)) = waiting.pop_front() {
            if !self.stored.contains(&sha256) && !self.holders.contains_key(&sha256) {
                self.out.push((link, FromGlobal::NoExecutable { sha256 }));
                continue;
            }
            match self.pick(link, &sha256, true) {
                Some(src) => self.direct(link, sha256, src),
                None => self.queued.push_back((link, sha256)),
            }
        }
    }
}

#[cfg(test)]
#[path = "staging_tests.rs"]
mod tests;
