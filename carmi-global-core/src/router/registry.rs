//! The machine registry: which connection reaches which machine, each
//! machine's presence (readiness, suspects, refusals) and heartbeat deadline,
//! and whether every machine fell silent at once (the global RM's own cut).
//! What a machine's messages do to jobs and processes is in `machines.rs`;
//! the loss clock (`on_tick`, the cut-off) in `tick.rs`.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use carmi_proto::ids::{ConnId, ProcessId};

use super::LinkId;

mod absent;
mod machines;
mod tick;

pub use tick::{CUT_OFF_LIMIT, CUT_OFF_MIN_MACHINES};

/// Who is at the other end of a connection.
pub(super) enum LinkRole {
    Machine(String),
    Admin,
}

/// What the router knows of one machine's connection and liveness.
#[derive(Default)]
pub(super) struct Presence {
    /// The machine's latest connection.
    pub link: Option<LinkId>,
    /// True once that connection has advertised: only then is it sent work
    /// (`Spawn`, `Kill`), so that its `Advertise` (with the processes still
    /// running) can never cross a `Spawn` sent on the same connection.
    pub ready: bool,
    /// Processes missing from its last `Advertise`, to settle at its next heartbeat.
    pub suspects: Vec<ProcessId>,
    /// Applications attached through it before its last `Advertise`: its
    /// local RM announces those it still serves again before its next
    /// heartbeat; the others left while it was away (`router/gone.rs`).
    pub unannounced: Vec<(ConnId, ProcessId)>,
    /// When it will be declared lost; `None` while it is not registered.
    pub deadline: Option<Duration>,
    /// Ads of it refused: when one was last logged, and how many since.
    pub refusals: Option<(Duration, u64)>,
    /// Its deadline was pushed back once because the router ran late
    /// ([`Router::on_tick`](super::Router::on_tick)); cleared by its next message.
    pub reprieved: bool,
}

/// Machines and connections (see the module documentation).
#[derive(Default)]
pub(super) struct Registry {
    pub links: HashMap<LinkId, LinkRole>,
    pub presence: HashMap<String, Presence>,
    /// Registered machines by deadline, the first lost first.
    pub deadlines: BTreeSet<(Duration, String)>,
    /// Since when every machine has been silent at once (this global RM
    /// cut off from the network, most likely), and when their deadlines are
    /// checked again: see [`Router::on_tick`](super::Router::on_tick).
    pub cut_off_since: Option<(Duration, Duration)>,
    /// Set once what the journal left on machines still absent a loss
    /// window after the start was settled (`absent.rs`).
    pub absent_expired: bool,
}

impl Registry {
    /// The connection to machine `name`, once it has advertised on it.
    pub fn ready_link(&self, name: &str) -> Option<LinkId> {
        self.presence
            .get(name)
            .filter(|p| p.ready)
            .and_then(|p| p.link)
    }

    /// Moves the deadline of machine `name`, if it has one (only registered
    /// machines do).
    pub fn set_deadline(&mut self, name: &str, deadline: Duration) {
        if let Some(p) = self.presence.get_mut(name)
            && let Some(old) = p.deadline.as_mut().map(|d| std::mem::replace(d, deadline))
        {
            self.deadlines.remove(&(old, name.to_string()));
            self.deadlines.insert((deadline, name.to_string()));
        }
    }

    /// Machine `name`'s local RM connected on `link`, not ready until it
    /// advertises; returns the connection it had, now dropped.
    pub fn connect(&mut self, name: String, link: LinkId) -> Option<LinkId> {
        let p = self.presence.entry(name.clone()).or_default();
        p.ready = false;
        let old = p.link.replace(link);
        if let Some(old) = old {
            self.links.remove(&old);
        }
        self.links.insert(link, LinkRole::Machine(name));
        old
    }

    /// Connection `link` of machine `name` closed: the machine is not lost
    /// for it (its local RM keeps its processes and may reconnect), but
    /// unreachable until it does.
    pub fn disconnected(&mut self, name: &str, link: LinkId) {
        if let Some(p) = self.presence.get_mut(name)
            && p.link == Some(link)
        {
            p.link = None;
            p.ready = false;
        }
    }

    /// Whether `link` is machine `name`'s latest connection.
    pub fn is_current(&self, name: &str, link: LinkId) -> bool {
        self.presence
            .get(name)
            .is_some_and(|p| p.link == Some(link))
    }

    /// Machine `name` was heard from: lost at `deadline` now, and may be
    /// reprieved again.
    pub fn heard(&mut self, name: &str, deadline: Duration) {
        self.set_deadline(name, deadline);
        if let Some(p) = self.presence.get_mut(name) {
            p.reprieved = false;
        }
    }

    /// Machine `name` registered on its latest connection: ready for work,
    /// and lost at `deadline` unless heard from.
    pub fn register(&mut self, name: &str, deadline: Duration) {
        let p = self.presence.entry(name.to_string()).or_default();
        p.ready = true;
        if let Some(old) = p.deadline.replace(deadline) {
            self.deadlines.remove(&(old, name.to_string()));
        }
        self.deadlines.insert((deadline, name.to_string()));
    }

    /// Machine `name` is lost: no deadline, not ready; returns its
    /// connection, forgotten, for the caller to close.
    pub fn unregister(&mut self, name: &str) -> Option<LinkId> {
        let p = self.presence.get_mut(name)?;
        if let Some(d) = p.deadline.take() {
            self.deadlines.remove(&(d, name.to_string()));
        }
        p.ready = false;
        let link = p.link.take()?;
        self.links.remove(&link);
        Some(link)
    }

    /// A refused update of machine `name` at `now`: how many were refused
    /// since the last one logged, when this one is to be logged (at most
    /// once per `period`), or `None` when it is only counted.
    pub fn note_refusal(&mut self, name: &str, now: Duration, period: Duration) -> Option<u64> {
        let p = self.presence.get_mut(name)?;
        match &mut p.refusals {
            Some((last, quiet)) if now.saturating_sub(*last) < period => {
                *quiet += 1;
                None
            }
            slot => {
                let quiet = slot.map_or(0, |(_, q)| q);
                *slot = Some((now, 0));
                Some(quiet)
            }
        }
    }

    /// The machines whose deadline is `at` or earlier, the first due first.
    pub fn due_by(&self, at: Duration) -> Vec<String> {
        self.deadlines
            .iter()
            .take_while(|(d, _)| *d <= at)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The earliest machine deadline, if any machine is registered.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.deadlines.first().map(|(d, _)| *d)
    }
}
