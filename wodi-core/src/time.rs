//! The core's one time type, at the bottom of the crate so that every
//! module may use it without importing the scheduler.

use std::time::Duration;

/// Time since the start of the run (virtual in tests and simulations).
pub type Time = Duration;
