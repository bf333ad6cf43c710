//! The loss clock: a machine is lost for its own silence. Heartbeats count
//! from their arrival, a router that ran late counts overdue machines'
//! silence again from when it resumed, and every machine silent at once is
//! taken for the global RM's own cut from the network ([`Router::on_tick`]).

use std::time::Duration;

use tracing::{info, warn};

use crate::router::registry::LinkRole;
use crate::router::{LinkId, Router};

/// Longest time every machine may be silent at once before they are
/// declared lost, by default: a global RM cut off from the network keeps
/// their jobs that long ([`Router::on_tick`], `--cut-off-limit-s`).
pub const CUT_OFF_LIMIT: Duration = Duration::from_secs(600);

/// Fewest machines whose silence together is taken for the global RM's own
/// cut: two machines stopping at once (a test killing both, two pilots
/// ending) is common enough to be their own.
pub const CUT_OFF_MIN_MACHINES: usize = 3;

impl Router {
    /// Any message from a registered machine proves it alive.
    pub(in crate::router) fn touch(&mut self, name: &str) {
        let deadline = self.now.saturating_add(self.lost_after());
        self.registry.heard(name, deadline);
    }

    /// Unchanged heartbeats of the machines on `links`, folded by a relay
    /// into one message at `now` (issue 36): each counts as a heartbeat
    /// with no update, in one router step instead of one per machine.
    /// Only a link its machine registered on counts: a relay's fold may
    /// overtake the machine's own messages still on their way through its
    /// channel, and those prove it alive themselves.
    pub fn on_alive(&mut self, links: &[LinkId], now: Duration) {
        self.advance(now);
        for &link in links {
            let Some(LinkRole::Machine(name)) = self.registry.links.get(&link) else {
                continue;
            };
            let registered =
                (self.registry.presence.get(name)).is_some_and(|p| p.ready && p.link == Some(link));
            if registered {
                let name = name.clone();
                self.touch(&name);
                self.heartbeat(link, &name, None);
            }
        }
        self.flush();
    }

    /// Gives every machine past its deadline, and not reprieved already
    /// since its last message, a whole new loss window from now (see
    /// [`Router::on_tick`]).
    pub(in crate::router) fn reprieve_overdue(&mut self) {
        let now = self.now;
        let overdue: Vec<String> = self
            .registry
            .due_by(now)
            .into_iter()
            .filter(|name| {
                self.registry
                    .presence
                    .get(name)
                    .is_some_and(|p| !p.reprieved)
            })
            .collect();
        if overdue.is_empty() {
            return;
        }
        warn!(
            machines = overdue.len(),
            "the global RM ran late past their deadlines (it was stopped or overloaded): \
             their silence counts again from now"
        );
        let deadline = now.saturating_add(self.lost_after());
        for name in overdue {
            self.registry.set_deadline(&name, deadline);
            if let Some(p) = self.registry.presence.get_mut(&name) {
                p.reprieved = true;
            }
        }
    }

    /// Declares every machine whose deadline has passed lost, unless the
    /// tick itself comes late.
    ///
    /// A tick more than a heartbeat period past a deadline means this
    /// process did not run in between (stopped, starved of CPU, swapping, or
    /// stuck on one input): the machines' heartbeats may be waiting unread in
    /// their sockets, and a silence the global RM could not hear is not
    /// theirs. Each overdue machine's silence then counts again from now,
    /// once (any message from it renews that): a machine that is really gone
    /// is lost one loss window later, one that was only unheard is not.
    pub fn on_tick(&mut self, now: Duration) {
        self.advance(now);
        self.journal_usage();
        self.policy_tick();
        let late = self
            .registry
            .deadlines
            .first()
            .is_some_and(|(d, _)| self.now.saturating_sub(*d) > self.config.heartbeat);
        if late {
            self.reprieve_overdue();
        }
        if self.cut_off() {
            self.settle_log_reads();
            self.pilot_tick();
            return;
        }
        while let Some((d, name)) = self.registry.deadlines.first().cloned() {
            if d > self.now {
                break;
            }
            let reason = format!(
                "machine `{name}` sent nothing for {} ms ({} heartbeat periods)",
                self.lost_after().as_millis(),
                self.config.missed_heartbeats
            );
            self.machine_lost(&name, reason);
        }
        self.expire_absent();
        self.settle_log_reads();
        self.pilot_tick();
        self.sweep_stored();
        if !self.jobs.unplaced.is_empty() {
            self.place_masters();
        }
        // Procs that started running make room under their cluster's `max_idle`.
        if !self.jobs.pending.is_empty() {
            self.materialize_all();
        }
    }

    /// True while every registered machine ([`CUT_OFF_MIN_MACHINES`] at
    /// least) is silent at once (the first past its deadline, every other
    /// silent for half the loss window at least), for less than
    /// [`RouterConfig::cut_off_limit`](super::RouterConfig::cut_off_limit): the silence is
    /// most likely this global RM's own, cut off from the network, and no
    /// machine is declared lost for it (their jobs keep running and talking
    /// to each other). Their deadlines are checked again every heartbeat
    /// period. When one is heard again, those still silent get as long
    /// again as the cut lasted to be heard too (a TCP connection's
    /// retransmissions back off during a cut: its next try may come that
    /// late), then the usual loss window.
    fn cut_off(&mut self) -> bool {
        let now = self.now;
        let lost_after = self.lost_after();
        let recheck_at = now.saturating_add(self.config.heartbeat);
        if let Some((since, recheck)) = self.registry.cut_off_since {
            // A machine heard since has a deadline past the last recheck.
            let heard = self
                .registry
                .deadlines
                .last()
                .is_some_and(|(d, _)| *d > recheck);
            if !heard {
                if now < recheck {
                    return true;
                }
                if now.saturating_sub(since) < self.config.cut_off_limit {
                    self.recheck_all(recheck_at, since);
                    return true;
                }
                warn!(
                    "no machine was heard for {} s: they are lost",
                    self.config.cut_off_limit.as_secs()
                );
                self.registry.cut_off_since = None;
                return false;
            }
            self.registry.cut_off_since = None;
            let cut = now.saturating_sub(since);
            let grace = now.saturating_add(cut).saturating_add(lost_after);
            info!(
                cut_ms = cut.as_millis() as u64,
                "a machine was heard again after the global RM's cut; the others have as long again"
            );
            for name in self.registry.due_by(recheck) {
                self.registry.set_deadline(&name, grace);
            }
            return false;
        }
        // Heartbeats arrive at different moments: when the first machine is
        // due, the others have been silent for at least half the window.
        let registered = self.registry.deadlines.len();
        let first_due = self
            .registry
            .deadlines
            .first()
            .is_some_and(|(d, _)| *d <= now);
        let all_silent = self
            .registry
            .deadlines
            .last()
            .is_some_and(|(d, _)| *d <= now.saturating_add(lost_after / 2));
        let limit = self.config.cut_off_limit;
        if registered < CUT_OFF_MIN_MACHINES || !first_due || !all_silent || limit.is_zero() {
            return false;
        }
        warn!(
            machines = registered,
            "no machine was heard for {} ms: this global RM seems cut off from the network; \
             no machine is declared lost for it (for {} s at most)",
            lost_after.as_millis(),
            limit.as_secs()
        );
        self.recheck_all(recheck_at, now.saturating_sub(lost_after));
        true
    }

    /// Moves every machine's deadline to `recheck`, a cut that began at `since`.
    fn recheck_all(&mut self, recheck: Duration, since: Duration) {
        self.registry.cut_off_since = Some((since, recheck));
        let names: Vec<String> = self
            .registry
            .deadlines
            .iter()
            .map(|(_, n)| n.clone())
            .collect();
        for name in names {
            self.registry.set_deadline(&name, recheck);
        }
    }
}
