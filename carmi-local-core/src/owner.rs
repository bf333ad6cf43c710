//! A simulated owner: present or away and the load of their programs, driven
//! by [`OwnerEvent`]s (from `owner-sim` or a test) instead of measured. Pure,
//! so that the simulator and the daemon share it; the real measurement
//! (terminals, `/proc`) stays in the daemon's `carmi_local::owner`.

use carmi_proto::msg::OwnerEvent;

use crate::policy::Observation;

/// A simulated owner: present or not, and the load of their programs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatedOwner {
    /// `None`: at the machine now; `Some(t)`: left at policy time `t`.
    left_at: Option<f64>,
    load: f64,
}

/// How long a simulated owner has been away at start-up: long enough for any
/// sensible `START` to hold at once.
pub const SIMULATED_INITIAL_IDLE: f64 = 1e9;

impl SimulatedOwner {
    /// An owner who has been away for [`SIMULATED_INITIAL_IDLE`] seconds at `now`.
    pub fn new(now: f64) -> SimulatedOwner {
        SimulatedOwner {
            left_at: Some(now - SIMULATED_INITIAL_IDLE),
            load: 0.0,
        }
    }

    /// Takes in an event at policy time `now`.
    pub fn apply(&mut self, event: OwnerEvent, now: f64) {
        match event {
            OwnerEvent::Arrive => self.left_at = None,
            OwnerEvent::Leave => {
                if self.left_at.is_none() {
                    self.left_at = Some(now);
                }
            }
            OwnerEvent::Load(l) if l.is_finite() && l >= 0.0 => self.load = l,
            OwnerEvent::Load(l) => {
                tracing::warn!(load = l, "owner load must be 0 or more; ignored")
            }
        }
    }

    /// What the policy sees at `now`.
    pub fn observation(&self, now: f64) -> Observation {
        Observation {
            keyboard_idle: self.left_at.map_or(0.0, |t| (now - t).max(0.0)),
            load_avg: self.load,
            non_pool_load: self.load,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_owner_starts_away_and_follows_events() {
        let mut o = SimulatedOwner::new(5.0);
        assert!(o.observation(5.0).keyboard_idle >= SIMULATED_INITIAL_IDLE);
        o.apply(OwnerEvent::Arrive, 10.0);
        assert_eq!(o.observation(20.0).keyboard_idle, 0.0);
        o.apply(OwnerEvent::Leave, 20.0);
        o.apply(OwnerEvent::Leave, 25.0);
        assert_eq!(o.observation(30.0).keyboard_idle, 10.0);
        o.apply(OwnerEvent::Load(0.8), 30.0);
        o.apply(OwnerEvent::Load(f64::NAN), 30.0);
        assert_eq!(o.observation(30.0).non_pool_load, 0.8);
    }
}
