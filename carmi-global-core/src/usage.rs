//! Fair share per user (issue 15, item 7): how much of the pool each user
//! has used lately, and the priority that follows from it.
//!
//! A user's *usage* is the hosts their jobs held, integrated over time in
//! host-seconds and halved every half-life (HTCondor's
//! `PRIORITY_HALFLIFE`, one day by default): a user who used 10 hosts for an
//! hour yesterday weighs half of one who used them for an hour just now.
//! The *effective priority* is `factor * (1 + usage in host-hours)`, lower
//! is better, as in HTCondor (where the factor is the priority factor a
//! pool manager sets per user; 1 here unless set). The allocator shares
//! hosts between users in inverse proportion to it: a user whose priority
//! is twice another's is owed half as many hosts.
//!
//! Pure: time comes in as `now` (the allocator's clock); the journal keeps
//! the usages across a restart ([`Usage::restore`]).

use std::collections::BTreeMap;
use std::time::Duration;

/// HTCondor's default `PRIORITY_HALFLIFE`: one day.
pub const DEFAULT_HALF_LIFE: Duration = Duration::from_secs(24 * 3600);

/// Below this many host-seconds a user who holds nothing is forgotten, so
/// the table does not grow with every user ever seen.
const FORGET_BELOW: f64 = 1e-3;

/// One user's accounting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UserUsage {
    /// Decayed usage, in host-seconds.
    pub host_seconds: f64,
    /// Priority factor (1 unless a pool manager sets one): scales the priority.
    pub factor: f64,
}

impl Default for UserUsage {
    fn default() -> Self {
        UserUsage {
            host_seconds: 0.0,
            factor: 1.0,
        }
    }
}

impl UserUsage {
    /// `factor * (1 + usage in host-hours)`; lower is better.
    pub fn priority(&self) -> f64 {
        self.factor * (1.0 + self.host_seconds / 3600.0)
    }
}

/// Every user's usage, accumulated up to a point in time.
#[derive(Clone, Debug)]
pub struct Usage {
    half_life: Duration,
    /// Accumulated up to here.
    at: Duration,
    users: BTreeMap<String, UserUsage>,
}

impl Default for Usage {
    fn default() -> Self {
        Usage::new(DEFAULT_HALF_LIFE)
    }
}

impl Usage {
    /// No usage yet; usage halves every `half_life` (at least a second).
    pub fn new(half_life: Duration) -> Usage {
        Usage {
            half_life: half_life.max(Duration::from_secs(1)),
            at: Duration::ZERO,
            users: BTreeMap::new(),
        }
    }

    /// The half-life usage decays with.
    pub fn half_life(&self) -> Duration {
        self.half_life
    }

    /// Up to which time usage is accumulated.
    pub fn at(&self) -> Duration {
        self.at
    }

    /// Accumulates from the last call to `now`, each user having held
    /// `held[user]` hosts all along (the caller samples often enough for
    /// that to be true enough): decays what was there and adds the exact
    /// integral of the decaying holding. An earlier `now` changes nothing.
    pub fn advance(&mut self, now: Duration, held: &BTreeMap<String, u32>) {
        if now <= self.at {
            return;
        }
        let dt = (now - self.at).as_secs_f64();
        self.at = now;
        let hl = self.half_life.as_secs_f64();
        let keep = 0.5f64.powf(dt / hl);
        // ∫0^dt h · 0.5^((dt - s)/hl) ds = h · hl/ln 2 · (1 - keep), which is
        // h · dt when dt is small against the half-life.
        let per_host = hl / std::f64::consts::LN_2 * (1.0 - keep);
        for u in self.users.values_mut() {
            u.host_seconds *= keep;
        }
        for (user, &h) in held {
            if h > 0 {
                let u = self.users.entry(user.clone()).or_default();
                u.host_seconds += f64::from(h) * per_host;
            }
        }
        self.users.retain(|name, u| {
            u.host_seconds >= FORGET_BELOW
                || u.factor != 1.0
                || held.get(name).is_some_and(|&h| h > 0)
        });
    }

    /// `user`'s accounting (a user never seen: no usage, factor 1).
    pub fn user(&self, user: &str) -> UserUsage {
        self.users.get(user).copied().unwrap_or_default()
    }

    /// `user`'s effective priority; lower is better.
    pub fn priority(&self, user: &str) -> f64 {
        self.user(user).priority()
    }

    /// Sets `user`'s priority factor (non-finite or non-positive: 1).
    pub fn set_factor(&mut self, user: &str, factor: f64) {
        let factor = if factor.is_finite() && factor > 0.0 {
            factor
        } else {
            1.0
        };
        self.users.entry(user.to_string()).or_default().factor = factor;
    }

    /// Every user with usage or a factor, by name.
    pub fn users(&self) -> impl Iterator<Item = (&str, UserUsage)> {
        self.users.iter().map(|(n, u)| (n.as_str(), *u))
    }

    /// Puts back a usage read from the journal (after a restart); a value
    /// that is not a finite non-negative number is ignored.
    pub fn restore(&mut self, user: &str, host_seconds: f64) {
        if host_seconds.is_finite() && host_seconds >= 0.0 {
            self.users.entry(user.to_string()).or_default().host_seconds = host_seconds;
        }
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
