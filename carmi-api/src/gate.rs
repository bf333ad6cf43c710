//! Who may hold a connection open: caps on connections in total, on those
//! still in their handshake, and on those in their handshake from one
//! address; and the summary log of what was refused.
//!
//! An unauthenticated connection costs a task, a socket and a small buffer
//! for as long as its handshake lasts (up to the handshake timeout). One
//! address holds at most [`ConnLimits::max_handshaking_per_addr`] handshakes,
//! and all together at most [`ConnLimits::max_handshaking`]; past either, a
//! new connection takes the place of the oldest handshake (of its address,
//! or of all), which a real client (whose handshake takes milliseconds) has
//! long finished. So a flood, from many addresses or from the very address
//! of a machine's own applications, never keeps an honest client out:
//! `carmi status` and a local application still get in. Authenticated connections know the pool
//! secret and are only counted in [`ConnLimits::max_connections`].
//!
//! Both daemons admit through it: the global RM every connection, the local
//! RM its applications' and its staging peers' (moved here from
//! `carmi-global` so that both share one gate).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::warn;

/// How often refusals are summed up in the log.
pub const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Most distinct addresses a refusal summary counts exactly.
const MAX_COUNTED_ADDRS: usize = 65_536;

/// Caps on connections (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most connections open at once, authenticated or not; past it new
    /// connections take the place of the oldest unauthenticated one, or are
    /// refused when every connection is authenticated.
    pub max_connections: usize,
    /// Most connections in their handshake at once; past it the oldest is dropped.
    pub max_handshaking: usize,
    /// Most connections in their handshake from one IP address; past it the
    /// oldest of that address is dropped.
    pub max_handshaking_per_addr: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 8192,
            max_handshaking: 1024,
            max_handshaking_per_addr: 128,
        }
    }
}

#[derive(Default)]
struct State {
    /// Connections holding a [`Ticket`].
    open: usize,
    /// Those in their handshake, oldest first: address and eviction bell.
    handshaking: BTreeMap<u64, (IpAddr, Arc<Notify>)>,
    /// The handshakes of each address, oldest first.
    per_addr: HashMap<IpAddr, BTreeSet<u64>>,
    next: u64,
}

impl State {
    fn forget_handshake(&mut self, id: u64) -> Option<Arc<Notify>> {
        let (addr, bell) = self.handshaking.remove(&id)?;
        if let Some(ids) = self.per_addr.get_mut(&addr) {
            ids.remove(&id);
            if ids.is_empty() {
                self.per_addr.remove(&addr);
            }
        }
        Some(bell)
    }

    /// Drops the oldest handshake: it no longer counts, and its task is told to end.
    fn evict_oldest(&mut self) -> bool {
        let Some(&id) = self.handshaking.keys().next() else {
            return false;
        };
        self.evict(id);
        true
    }

    /// Drops the oldest handshake from `addr`, if any.
    fn evict_oldest_of(&mut self, addr: IpAddr) {
        let oldest = self
            .per_addr
            .get(&addr)
            .and_then(|ids| ids.first().copied());
        if let Some(id) = oldest {
            self.evict(id);
        }
    }

    fn evict(&mut self, id: u64) {
        let bell = self.forget_handshake(id).expect("listed above");
        self.open -= 1;
        bell.notify_one();
    }
}

/// Admits connections under [`ConnLimits`] and logs refusals in summary.
pub struct Gate {
    limits: ConnLimits,
    state: Mutex<State>,
    log: Mutex<RefusalLog>,
    /// Refusals noted since the start, for the daemons' metrics.
    refused: std::sync::atomic::AtomicU64,
}

/// Why a connection was not admitted; its peer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// A connection's place at the [`Gate`], given back on drop.
pub struct Ticket {
    gate: Arc<Gate>,
    place: Place,
    evicted: Arc<Notify>,
}

/// Where a [`Ticket`] stands.
enum Place {
    /// In its handshake, under this entry (unless the gate evicted it).
    Handshake(u64),
    Authenticated,
    /// Evicted: its place was given back by the gate.
    Evicted,
}

impl Gate {
    /// A gate with `limits`.
    pub fn new(limits: ConnLimits) -> Arc<Gate> {
        Arc::new(Gate {
            limits,
            state: Mutex::default(),
            log: Mutex::new(RefusalLog::default()),
            refused: Default::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts, not broken invariants.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection from `peer`, starting its handshake.
    pub fn admit(self: &Arc<Gate>, peer: IpAddr) -> Result<Ticket, Refusal> {
        let mut s = self.state();
        let from_peer = s.per_addr.get(&peer).map_or(0, BTreeSet::len);
        if from_peer >= self.limits.max_handshaking_per_addr.max(1) {
            s.evict_oldest_of(peer);
        }
        if s.open >= self.limits.max_connections && !s.evict_oldest() {
            return Err(Refusal(format!(
                "this daemon has {} connections open (max_connections)",
                s.open
            )));
        }
        if s.handshaking.len() >= self.limits.max_handshaking {
            s.evict_oldest();
        }
        let id = s.next;
        s.next += 1;
        let evicted = Arc::new(Notify::new());
        s.handshaking.insert(id, (peer, evicted.clone()));
        s.per_addr.entry(peer).or_default().insert(id);
        s.open += 1;
        Ok(Ticket {
            gate: self.clone(),
            place: Place::Handshake(id),
            evicted,
        })
    }

    /// Connections open and in their handshake, for tests and logs.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state();
        (s.open, s.handshaking.len())
    }

    /// Connections admitted and refusals noted since the gate was made
    /// (counters of the daemons' `/metrics`).
    pub fn totals(&self) -> (u64, u64) {
        let admitted = self.state().next;
        let refused = self.refused.load(std::sync::atomic::Ordering::Relaxed);
        (admitted, refused)
    }

    /// Notes a refused connection or failed handshake of `peer`: the first
    /// of a period is logged with its reason, the rest summed up by [`Gate::flush_log`].
    pub fn note_refusal(&self, peer: IpAddr, reason: &str) {
        self.refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.note(peer, Instant::now()) {
            warn!(%peer, "connection refused: {reason} (further refusals are summed up every {} s)", REFUSAL_LOG_PERIOD.as_secs());
        }
    }

    /// Logs one line summing up the refusals since the last, if any; the
    /// driver calls it every [`REFUSAL_LOG_PERIOD`].
    pub fn flush_log(&self) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((count, addrs)) = log.take() {
            warn!(
                "refused {count} connections or handshakes from {addrs} addresses in the last {} s",
                REFUSAL_LOG_PERIOD.as_secs()
            );
        }
    }
}

impl Ticket {
    /// The handshake succeeded: the connection no longer counts as one in
    /// its handshake. False when it was dropped meanwhile to make room.
    pub fn authenticated(&mut self) -> bool {
        let Place::Handshake(id) = self.place else {
            return matches!(self.place, Place::Authenticated);
        };
        let kept = self.gate.state().forget_handshake(id).is_some();
        self.place = if kept {
            Place::Authenticated
        } else {
            Place::Evicted
        };
        kept
    }

    /// Completes when the gate dropped this connection's handshake to make room.
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.gate.state();
        let given_back = match self.place {
            Place::Handshake(id) => s.forget_handshake(id).is_none(),
            Place::Authenticated => false,
            Place::Evicted => true,
        };
        if !given_back {
            s.open -= 1;
        }
    }
}

/// Refusals since the last summary.
#[derive(Default)]
struct RefusalLog {
    /// When the last line was written, if within the current period.
    logged: Option<Instant>,
    /// Refusals not written individually.
    count: u64,
    addrs: HashSet<IpAddr>,
}

impl RefusalLog {
    /// Counts a refusal; true when it should be logged on its own (the
    /// first after a quiet period).
    fn note(&mut self, peer: IpAddr, now: Instant) -> bool {
        if self
            .logged
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_PERIOD)
        {
            self.logged = Some(now);
            return true;
        }
        self.count += 1;
        if self.addrs.len() < MAX_COUNTED_ADDRS {
            self.addrs.insert(peer);
        }
        false
    }

    /// Refusals and distinct addresses since the last call, if any.
    fn take(&mut self) -> Option<(u64, usize)> {
        if self.count == 0 {
            return None;
        }
        let out = (self.count, self.addrs.len());
        self.count = 0;
        self.addrs = HashSet::new();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn limits(total: usize, handshaking: usize, per_addr: usize) -> ConnLimits {
        ConnLimits {
            max_connections: total,
            max_handshaking: handshaking,
            max_handshaking_per_addr: per_addr,
        }
    }

    #[tokio::test]
    async fn one_address_past_its_cap_drops_its_own_oldest_and_no_other() {
        let gate = Gate::new(limits(100, 100, 2));
        let mut other = gate.admit(ip(1)).unwrap();
        let mut a = gate.admit(ip(2)).unwrap();
        let _b = gate.admit(ip(2)).unwrap();
        let mut c = gate.admit(ip(2)).unwrap();
        tokio::time::timeout(Duration::from_secs(1), a.evicted())
            .await
            .expect("the address's oldest was told to go");
        assert!(!a.authenticated());
        assert!(
            c.authenticated(),
            "the newest of the flooding address gets in"
        );
        assert!(
            other.authenticated(),
            "another address's older handshake stays"
        );
        assert_eq!(gate.counts(), (3, 1));
        drop(c);
        assert_eq!(gate.counts(), (2, 1));
    }

    #[tokio::test]
    async fn the_oldest_handshake_makes_room_for_a_new_connection() {
        let gate = Gate::new(limits(100, 2, 10));
        let mut old = gate.admit(ip(2)).unwrap();
        let _mid = gate.admit(ip(3)).unwrap();
        let mut new = gate.admit(ip(1)).unwrap();
        tokio::time::timeout(Duration::from_secs(1), old.evicted())
            .await
            .expect("the oldest was told to go");
        assert!(!old.authenticated(), "an evicted handshake stays out");
        assert!(new.authenticated());
        assert_eq!(gate.counts(), (2, 1));
        drop(old);
        assert_eq!(
            gate.counts(),
            (2, 1),
            "an evicted ticket was already given back"
        );
    }

    #[test]
    fn authenticated_connections_are_never_evicted_the_total_is_refused() {
        let gate = Gate::new(limits(2, 10, 10));
        let mut a = gate.admit(ip(1)).unwrap();
        let mut b = gate.admit(ip(1)).unwrap();
        assert!(a.authenticated() && b.authenticated());
        let Refusal(why) = gate.admit(ip(2)).err().unwrap();
        assert!(why.contains("max_connections"), "{why}");
        drop(a);
        assert!(gate.admit(ip(2)).is_ok());
    }

    #[test]
    fn refusals_are_logged_once_then_summed_up() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        assert!(log.note(ip(1), t0));
        for i in 0..1000u32 {
            assert!(!log.note(ip((i % 7) as u8), t0 + Duration::from_millis(i as u64)));
        }
        assert_eq!(log.take(), Some((1000, 7)));
        assert_eq!(log.take(), None);
        assert!(log.note(ip(1), t0 + REFUSAL_LOG_PERIOD));
    }
}
