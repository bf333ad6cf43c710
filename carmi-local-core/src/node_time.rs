//! The core's deadlines: the end of a killed process's grace (SIGKILL if it
//! has not exited) and the next heartbeat, and shutting down.
//!
//! The driver keeps no timers of its own for these: it tells the core the
//! time ([`Core::on_time`]) before every input and when
//! [`Core::next_deadline`] comes, and the core decides what is due. Times
//! are seconds on the driver's clock (the owner policy's), which only moves
//! forward.
//!
//! Kept apart from `node.rs` so that each file stays readable.

use std::time::Duration;

use carmi_proto::ids::ProcessId;
use carmi_proto::msg::ToGlobal;

use super::{Core, Effect, ProcState};

impl Core {
    /// Sets the SIGTERM-to-SIGKILL delay of a killed process and the
    /// heartbeat period used when the global RM names none (configuration:
    /// `kill_grace_ms`, `heartbeat_ms`).
    pub fn set_timers(&mut self, kill_grace: Duration, heartbeat_fallback: Duration) {
        self.time.kill_grace = kill_grace.as_secs_f64();
        // A zero period would make every instant a heartbeat.
        self.time.heartbeat_fallback = heartbeat_fallback.as_secs_f64().max(0.001);
    }

    /// The time is `now`: carries out what is due by then (SIGKILL to a
    /// process whose kill grace is over, a heartbeat). The driver calls it
    /// before every input and at [`Core::next_deadline`]; an earlier time
    /// than the last one given is taken as the last one.
    pub fn on_time(&mut self, now: f64) {
        if now > self.time.now {
            self.time.now = now;
        }
        let now = self.time.now;
        let due: Vec<ProcessId> = self
            .procs
            .iter()
            .filter(|(_, p)| p.kill_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for process in due {
            self.procs.get_mut(&process).expect("listed above").kill_at = None;
            tracing::info!(%process, "still running after the kill grace: SIGKILL");
            self.effects.push(Effect::KillNow(process));
        }
        if !self.is_registered() {
            self.fail_held_too_long();
        }
        if let Some(at) = self.orphaned_at()
            && at <= now
        {
            self.time.orphaned = true;
            let away_s = now - self.time.away_since;
            tracing::error!(
                away_s,
                "no registration with the global RM for the orphan limit: stopping"
            );
            self.effects.push(Effect::Orphaned { away_s });
        }
        if let Some(at) = self.time.heartbeat_at
            && at <= now
        {
            // The next one a full period after this one is carried out, not
            // after when it was due: a late driver does not send a burst.
            self.time.heartbeat_at = Some(now + self.time.heartbeat_period);
            self.effects.push(Effect::Heartbeat);
        }
    }

    /// When [`Core::on_time`] must be called next at the latest, if ever
    /// (then [`Core::policy_due`] says whether the owner policy is due too).
    pub fn next_deadline(&self) -> Option<f64> {
        self.procs
            .values()
            .filter_map(|p| p.kill_at)
            .chain(self.time.heartbeat_at)
            .chain(self.orphaned_at())
            .chain(self.held_deadline())
            .chain(self.time.policy_at)
            .min_by(f64::total_cmp)
    }

    /// Sets how long the machine may go without a registration with the
    /// global RM (counted from the start, or from when the last one ended)
    /// before the core asks the daemon to stop ([`Effect::Orphaned`]);
    /// `None` (the default): never. Pilots set it, so that one whose global
    /// RM stays away leaves its batch allocation instead of idling in it.
    pub fn set_orphan_limit(&mut self, limit: Option<Duration>) {
        self.time.orphan_limit = limit.map(|l| l.as_secs_f64());
    }

    /// When the machine counts as orphaned, if it is away and has a limit.
    fn orphaned_at(&self) -> Option<f64> {
        let limit = self.time.orphan_limit?;
        (!self.is_registered() && !self.time.orphaned).then_some(self.time.away_since + limit)
    }

    /// The machine goes away for good (its daemon was told to stop): a
    /// registered global RM is told first, with `reason`, so that it
    /// declares this machine's hosts lost before the processes here are
    /// killed. Call before [`Core::shut_down`]; false when no global RM is
    /// registered to hear it.
    pub fn leave(&mut self, reason: &str) -> bool {
        if !self.is_registered() {
            return false;
        }
        tracing::info!(reason, "telling the global RM that this machine leaves");
        self.send(
            ToGlobal::Leaving {
                reason: reason.to_string(),
            },
            bytes::Bytes::new(),
        );
        true
    }

    /// The daemon is stopping: no process starts any more, and every process
    /// here is killed (SIGTERM, SIGKILL after the kill grace), including one
    /// being vacated and one still launching (once it has started); one
    /// still waiting for its executable is dropped and reported. The driver
    /// keeps feeding exits and time until [`Core::job_count`] is 0.
    pub fn shut_down(&mut self) {
        self.accepting = false;
        let ids: Vec<ProcessId> = self.procs.keys().copied().collect();
        for process in ids {
            match self.procs[&process].state {
                ProcState::Running { .. } => self.start_kill(process),
                ProcState::Launching { .. } | ProcState::Fetching => self.on_kill(process),
            }
        }
    }

    /// SIGTERM to a started process now, SIGKILL at the end of the kill
    /// grace unless it exits first (an earlier deadline is kept).
    pub(super) fn start_kill(&mut self, process: ProcessId) {
        let at = self.time.now + self.time.kill_grace;
        let Some(p) = self.procs.get_mut(&process) else {
            return;
        };
        p.state = ProcState::Running { killing: true };
        p.kill_at = Some(p.kill_at.map_or(at, |t| t.min(at)));
        self.effects.push(Effect::Kill(process));
    }

    /// Registered: heartbeats every `heartbeat_ms` (the fallback period when
    /// the global RM names none), the first one a period from now.
    pub(super) fn start_heartbeats(&mut self, heartbeat_ms: u64) {
        let period = if heartbeat_ms == 0 {
            self.time.heartbeat_fallback
        } else {
            Duration::from_millis(heartbeat_ms).as_secs_f64()
        };
        tracing::info!(
            period_ms = (period * 1000.0) as u64,
            "registered with the global RM"
        );
        self.time.heartbeat_period = period;
        self.time.heartbeat_at = Some(self.time.now + period);
    }
}
