//! The link to the global RM as the driver keeps it, decided here with the
//! time given: when to connect again after a session ended ([`Reconnect`]:
//! exponential backoff with jitter), and what happens to messages on their
//! way into a session's bounded queue ([`Outbox`]: what waits for room, when
//! a session that makes no progress counts as stalled and is kicked, what is
//! handed back when it ends).
//!
//! Times are seconds on the driver's clock, which only moves forward; the
//! driver carries out the outputs ([`LinkOutput`]) and arms one timer at
//! each machine's `next_deadline`. What the messages are, and which must
//! reach the global RM, is the router core's business (`node`): the outbox
//! only keeps their order.

use std::collections::VecDeque;
use std::time::Duration;

/// First reconnection delay.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest reconnection delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long the last messages for the global RM (the exits of the processes
/// killed at shutdown) may take to go out once the daemon stops, whether
/// the session was idle or blocked in a write the global RM does not read.
pub const LAST_WORDS: Duration = Duration::from_secs(2);

/// What the driver must do for the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkOutput {
    /// Connect to the global RM (the backoff's delay is over).
    Reconnect,
    /// End the current session at once, even in the middle of a write: the
    /// global RM stopped reading. What it did not write comes back with
    /// [`Outbox::on_down`] and goes out on the next session.
    Kick,
}

/// When to connect to the global RM: at once at start, then after each
/// lost session or failed attempt a delay between half and all of a step
/// that doubles from [`BACKOFF_MIN`] to [`BACKOFF_MAX`], the jitter keeping
/// a pool of local RMs from reconnecting in lockstep after the global RM
/// restarts. A session that got as far as registering starts the steps over.
///
/// Call order: [`Reconnect::on_connected`] when a connection is made;
/// [`Reconnect::on_lost`] when it ends or an attempt fails; at
/// [`Reconnect::next_deadline`], [`Reconnect::on_time`].
#[derive(Clone, Debug)]
pub struct Reconnect {
    /// The current step, seconds.
    step: f64,
    /// When to connect, while waiting; `None` while connecting or connected.
    connect_at: Option<f64>,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            step: BACKOFF_MIN.as_secs_f64(),
            connect_at: None,
        }
    }
}

impl Reconnect {
    /// A connection is made (the session has started).
    pub fn on_connected(&mut self) {
        self.connect_at = None;
    }

    /// The session ended at `now` (`registered`: it got as far as
    /// `Registered`), or an attempt failed (`registered` false). `jitter`,
    /// drawn by the driver uniformly from [0, 1], places the delay between
    /// half and all of the step. Returns the delay, seconds.
    pub fn on_lost(&mut self, now: f64, registered: bool, jitter: f64) -> f64 {
        if registered {
            self.step = BACKOFF_MIN.as_secs_f64();
        }
        let delay = self.step * (0.5 + 0.5 * jitter.clamp(0.0, 1.0));
        self.step = (self.step * 2.0).min(BACKOFF_MAX.as_secs_f64());
        self.connect_at = Some(now + delay);
        delay
    }

    /// When [`Reconnect::on_time`] must be called next, while waiting.
    pub fn next_deadline(&self) -> Option<f64> {
        self.connect_at
    }

    /// The time is `now`: [`LinkOutput::Reconnect`] once the delay is over.
    pub fn on_time(&mut self, now: f64) -> Option<LinkOutput> {
        let at = self.connect_at?;
        (at <= now).then(|| {
            self.connect_at = None;
            LinkOutput::Reconnect
        })
    }
}

/// Where a message given to [`Outbox::send`] goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<M> {
    /// Into the session's queue now; if it is full, back with
    /// [`Outbox::on_full`], if the session has ended, [`Outbox::on_closed`].
    Queue(M),
    /// Kept by the outbox, behind earlier messages, until the session's
    /// queue has room or the next session.
    Kept,
    /// No session to take it (none was ever up): dropped.
    NoLink(M),
}

/// The messages on their way into a session's bounded queue (what the
/// session writes to the global RM). What finds the queue full waits here,
/// in order, and moves in as the session writes, so that a burst (the
/// backlog replayed after a reconnection) is not mistaken for a global RM
/// that stopped reading. A session that takes nothing waiting for the stall
/// time has stopped reading: it is kicked ([`LinkOutput::Kick`]), what it
/// did not write is kept, and the link reconnects. So a stalled global RM
/// costs at most what the machine produces in that time.
///
/// Call order: [`Outbox::on_up`] when a session is up; [`Outbox::send`]
/// for every message; when the session's queue has room and
/// [`Outbox::wants_room`], [`Outbox::on_room`]; at
/// [`Outbox::next_deadline`], [`Outbox::on_time`]; [`Outbox::on_down`] when
/// the session has ended, which returns every message not written, in order.
#[derive(Debug)]
pub struct Outbox<M> {
    /// How long a full queue may make no progress.
    stall: f64,
    /// A session takes messages.
    up: bool,
    /// Found the queue full; they keep their order and go in as it drains.
    waiting: VecDeque<M>,
    /// While `waiting` is not empty: when the session, without progress, counts as stalled.
    stall_at: Option<f64>,
    /// After a kick or a closed queue, until [`Outbox::on_down`]: messages
    /// that follow the session's unsent rest.
    overflow: Option<Vec<M>>,
}

impl<M> Outbox<M> {
    /// No session yet; `stall` is how long a full queue may make no progress.
    pub fn new(stall: Duration) -> Outbox<M> {
        Outbox {
            stall: stall.as_secs_f64(),
            up: false,
            waiting: VecDeque::new(),
            stall_at: None,
            overflow: None,
        }
    }

    /// A session is up and takes messages.
    pub fn on_up(&mut self) {
        self.up = true;
    }

    /// True while a session takes messages.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Messages waiting for room in the session's queue.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Where `m` goes: the session's queue, behind those waiting for room,
    /// or (after a kick) with the unsent rest.
    pub fn send(&mut self, m: M) -> Route<M> {
        if let Some(overflow) = &mut self.overflow {
            overflow.push(m);
            return Route::Kept;
        }
        if !self.up {
            return Route::NoLink(m);
        }
        if !self.waiting.is_empty() {
            self.waiting.push_back(m);
            return Route::Kept;
        }
        Route::Queue(m)
    }

    /// The session's queue was full at `now`: `m` waits, and the stall
    /// clock starts.
    pub fn on_full(&mut self, m: M, now: f64) {
        self.waiting.push_back(m);
        self.stall_at = Some(now + self.stall);
    }

    /// The session's queue was closed (its end is being reported): `m` is
    /// kept for the next session, with what follows until [`Outbox::on_down`].
    pub fn on_closed(&mut self, m: M) {
        self.up = false;
        self.overflow = Some(vec![m]);
    }

    /// True when messages wait for room in an up session's queue: the driver
    /// watches for room only then.
    pub fn wants_room(&self) -> bool {
        self.up && !self.waiting.is_empty()
    }

    /// The session wrote something at `now`, making room: the oldest waiting
    /// message goes in (returned), and the stall clock starts again.
    pub fn on_room(&mut self, now: f64) -> Option<M> {
        let m = self.waiting.pop_front();
        self.stall_at = (!self.waiting.is_empty()).then_some(now + self.stall);
        m
    }

    /// When the session counts as stalled, if messages are waiting.
    pub fn next_deadline(&self) -> Option<f64> {
        self.stall_at
    }

    /// The time is `now`: once the stall time passed without progress, the
    /// global RM stopped reading, and the session is to be ended
    /// ([`LinkOutput::Kick`]); nothing unsent is lost.
    pub fn on_time(&mut self, now: f64) -> Option<LinkOutput> {
        if self.stall_at.is_none_or(|at| at > now) {
            return None;
        }
        self.stall_at = None;
        if !self.up {
            return None;
        }
        self.up = false;
        self.overflow = Some(Vec::new());
        Some(LinkOutput::Kick)
    }

    /// The session ended: every message it was given but did not write
    /// (`unwritten`, in order), then those that waited, then those kept
    /// since a kick.
    pub fn on_down(&mut self, unwritten: Vec<M>) -> Vec<M> {
        self.up = false;
        self.stall_at = None;
        let mut unsent = unwritten;
        unsent.extend(self.waiting.drain(..));
        unsent.extend(self.overflow.take().unwrap_or_default());
        unsent
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
