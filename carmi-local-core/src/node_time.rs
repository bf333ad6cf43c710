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
        if let Some(at) = self.time.heartbeat_at
            && at <= now
        {
            // The next one a full period after this one is carried out, not
            // after when it was due: a late driver does not send a burst.
            self.time.heartbeat_at = Some(now + self.time.heartbeat_period);
            self.effects.push(Effect::Heartbeat);
        }
    }

    /// When [`Core::on_time`] must be called next at the latest, if ever.
    pub fn next_deadline(&self) -> Option<f64> {
        self.procs
            .values()
            .filter_map(|p| p.kill_at)
            .chain(self.time.heartbeat_at)
            .min_by(f64::total_cmp)
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
