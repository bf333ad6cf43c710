//! The allocator's clock: the time its inputs were given at, and the same
//! in Unix seconds for `time()` in class expressions. Only moves forward.

use std::time::Duration;

/// The current time, as the caller said it is.
#[derive(Default)]
pub(super) struct Clock {
    /// Time since clock zero.
    pub(super) now: Duration,
    /// Unix seconds at clock zero.
    unix_epoch: u64,
    /// `now` in Unix seconds: what `time()` is in class expressions.
    pub(super) unix: i64,
}

impl Clock {
    /// Names the Unix time at clock zero.
    pub(super) fn set_unix_epoch(&mut self, unix_epoch: u64) {
        self.unix_epoch = unix_epoch;
        self.sync_unix();
    }

    /// Moves to `now`; an earlier `now` is ignored.
    pub(super) fn advance_to(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.sync_unix();
    }

    fn sync_unix(&mut self) {
        let unix = self.unix_epoch.saturating_add(self.now.as_secs());
        self.unix = i64::try_from(unix).unwrap_or(i64::MAX);
    }
}
