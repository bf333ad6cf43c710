//! How the daemon stops, decided here with the time given: first, for a
//! machine that leaves for good, a wait for the global RM to act on
//! `Leaving`; then the wait for every process to exit after the core killed
//! them ([`crate::node::Core::shut_down`]). Each phase takes only the inputs
//! that matter to it (nothing new starts) and ends at a deadline at the
//! latest, so that a global RM that does not answer or a process that does
//! not die cannot keep the daemon from stopping.
//!
//! Times are seconds on the driver's clock, which only moves forward.

use std::time::Duration;

/// How long a leaving machine waits for the global RM to act on its
/// `Leaving` (it closes the connection) before killing its processes anyway.
pub const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// How long, past the kill grace, the processes killed at shutdown may take
/// to exit (and their exits to be handled) before the daemon stops anyway.
pub const EXIT_MARGIN: Duration = Duration::from_secs(3);

/// An input of the driver while it stops, as far as stopping cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopInput {
    /// A process exited.
    Exited,
    /// A launch under way when stopping began finished.
    Launched,
    /// A session with the global RM is up.
    GlobalUp,
    /// The session with the global RM ended.
    GlobalDown,
    /// The global RM registered this machine.
    Registered,
    /// Anything else (requests, owner events...): not acted on.
    Other,
}

/// What the driver must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutput {
    /// The global RM acted on `Leaving` (it closed the connection): go on
    /// to killing the processes.
    Left,
    /// The phase's deadline passed: go on regardless (say so in the logs).
    TimedOut,
}

/// Which wait the daemon is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Told the global RM that the machine leaves; waiting for it to close.
    Leaving,
    /// Killed every process; waiting for their exits.
    Killing,
}

/// One phase of stopping and its deadline.
///
/// Call order: [`Stopping::leaving`] after the core's `leave` said a global
/// RM is there to hear it, or [`Stopping::killing`] after its `shut_down`;
/// then for each input, [`Stopping::takes`] (hand it to the core only if
/// so) and [`Stopping::on_input`]; at [`Stopping::deadline`],
/// [`Stopping::on_time`]. The killing phase is over when the core has no
/// process left, or at its deadline.
#[derive(Clone, Debug)]
pub struct Stopping {
    phase: Phase,
    deadline: f64,
}

impl Stopping {
    /// At `now`, the global RM was told that this machine leaves.
    pub fn leaving(now: f64) -> Stopping {
        Stopping {
            phase: Phase::Leaving,
            deadline: now + LEAVE_WAIT.as_secs_f64(),
        }
    }

    /// At `now`, every process was killed, each with `kill_grace` before SIGKILL.
    pub fn killing(now: f64, kill_grace: Duration) -> Stopping {
        Stopping {
            phase: Phase::Killing,
            deadline: now + (kill_grace + EXIT_MARGIN).as_secs_f64(),
        }
    }

    /// Whether the core is to hear of `input`: process exits and finished
    /// launches always (so that they are reported), and while killing also
    /// the global link's comings and goings (so that exits reach a global
    /// RM that comes back); nothing that would start something new.
    pub fn takes(&self, input: StopInput) -> bool {
        match input {
            StopInput::Exited | StopInput::Launched | StopInput::GlobalDown => true,
            StopInput::GlobalUp | StopInput::Registered => self.phase == Phase::Killing,
            StopInput::Other => false,
        }
    }

    /// After `input` was handled: the leaving phase is over once the global
    /// RM closed the connection.
    pub fn on_input(&mut self, input: StopInput) -> Option<StopOutput> {
        (self.phase == Phase::Leaving && input == StopInput::GlobalDown).then_some(StopOutput::Left)
    }

    /// When the phase ends at the latest.
    pub fn deadline(&self) -> f64 {
        self.deadline
    }

    /// The time is `now`: [`StopOutput::TimedOut`] once the deadline passed.
    pub fn on_time(&self, now: f64) -> Option<StopOutput> {
        (now >= self.deadline).then_some(StopOutput::TimedOut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_ends_when_the_global_rm_closes_or_after_the_wait() {
        let mut s = Stopping::leaving(10.0);
        assert!(s.takes(StopInput::Exited) && s.takes(StopInput::GlobalDown));
        assert!(!s.takes(StopInput::GlobalUp) && !s.takes(StopInput::Other));
        assert_eq!(s.on_input(StopInput::Exited), None);
        assert_eq!(s.on_time(11.9), None);
        assert_eq!(s.on_time(12.0), Some(StopOutput::TimedOut));
        assert_eq!(s.on_input(StopInput::GlobalDown), Some(StopOutput::Left));
    }

    #[test]
    fn killing_takes_exits_and_the_link_until_the_grace_and_a_margin() {
        let mut s = Stopping::killing(100.0, Duration::from_secs(2));
        for i in [
            StopInput::Exited,
            StopInput::Launched,
            StopInput::GlobalUp,
            StopInput::GlobalDown,
            StopInput::Registered,
        ] {
            assert!(s.takes(i), "{i:?}");
            assert_eq!(s.on_input(i), None, "only the core's process count ends it");
        }
        assert!(!s.takes(StopInput::Other));
        assert_eq!(s.deadline(), 105.0);
        assert_eq!(s.on_time(104.99), None);
        assert_eq!(s.on_time(105.0), Some(StopOutput::TimedOut));
    }
}
