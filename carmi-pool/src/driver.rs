//! The wall-clock driver: plays an owner schedule to running local RMs,
//! `speedup` virtual seconds per wall second.
//!
//! It decides nothing: the schedule ([`owner_model`]) says what happens
//! when, the local RMs' owner policy decides what to do about it. Waiting is
//! against the start instant (not from event to event), so that delays in
//! delivery never accumulate into drift.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use carmi_api::msg::OwnerEvent;
use carmi_local::daemon::Daemon;
use tokio::sync::watch;
use tokio::time::Instant;

use owner_model::Scheduled;

/// Something that takes owner events: a local RM, or a recorder in tests.
pub trait OwnerTarget: Send + Sync + 'static {
    /// Delivers one event; false if the target has stopped.
    fn owner_event(&self, event: OwnerEvent) -> impl Future<Output = bool> + Send;
}

impl OwnerTarget for Daemon {
    fn owner_event(&self, event: OwnerEvent) -> impl Future<Output = bool> + Send {
        Daemon::owner_event(self, event)
    }
}

/// A local RM reached over its control connection (another process, or
/// another machine): what `owner-sim drive` feeds a real pool through.
pub struct RemoteOwner {
    link: tokio::sync::Mutex<carmi_api::control::OwnerLink>,
    addr: String,
}

impl RemoteOwner {
    /// Connects to the local RM whose application listen address is `addr`.
    pub async fn connect(
        addr: &str,
        secret: &carmi_api::handshake::Secret,
    ) -> Result<RemoteOwner, carmi_api::control::ControlError> {
        Ok(RemoteOwner {
            link: tokio::sync::Mutex::new(
                carmi_api::control::OwnerLink::connect(addr, secret).await?,
            ),
            addr: addr.to_string(),
        })
    }

    /// Reports `event` and returns the local RM's answer.
    pub async fn send(
        &self,
        event: OwnerEvent,
    ) -> Result<carmi_api::msg::FromLocalControl, carmi_api::control::ControlError> {
        self.link.lock().await.send(event).await
    }
}

impl OwnerTarget for RemoteOwner {
    async fn owner_event(&self, event: OwnerEvent) -> bool {
        match self.send(event).await {
            Ok(carmi_api::msg::FromLocalControl::OwnerApplied { applied, .. }) => applied,
            Err(e) => {
                tracing::warn!(addr = %self.addr, error = %e, "owner event not delivered");
                false
            }
        }
    }
}

/// What a driver run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveReport {
    /// Events delivered.
    pub delivered: u64,
    /// Events whose target had stopped (or whose host does not exist).
    pub refused: u64,
}

/// Delivers `schedule` to `targets` (indexed by host) in wall time from
/// `start`, until the schedule ends or `stop` turns true (or its sender is
/// dropped).
pub async fn drive<T: OwnerTarget>(
    schedule: impl Iterator<Item = Scheduled>,
    targets: &[Arc<T>],
    speedup: f64,
    start: Instant,
    mut stop: watch::Receiver<bool>,
) -> DriveReport {
    let mut report = DriveReport::default();
    for e in schedule {
        let at = start + wall_offset(e.time, speedup);
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = stop.wait_for(|s| *s) => return report,
        }
        let ok = match targets.get(e.host) {
            Some(t) => t.owner_event(e.event).await,
            None => false,
        };
        if ok {
            report.delivered += 1;
        } else {
            tracing::debug!(host = e.host, event = ?e.event, "owner event not delivered");
            report.refused += 1;
        }
    }
    report
}

/// Wall time after the start at which virtual time `t` happens.
fn wall_offset(t: f64, speedup: f64) -> Duration {
    // A schedule that runs for centuries at this speed-up is as good as
    // never: saturate rather than panic on a huge value.
    Duration::try_from_secs_f64(t / speedup).unwrap_or(Duration::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder {
        seen: Mutex<Vec<(Duration, OwnerEvent)>>,
        start: Instant,
    }

    impl OwnerTarget for Recorder {
        async fn owner_event(&self, event: OwnerEvent) -> bool {
            self.seen
                .lock()
                .unwrap()
                .push((self.start.elapsed(), event));
            true
        }
    }

    #[tokio::test(start_paused = true)]
    async fn events_arrive_at_virtual_time_over_speedup() {
        let start = Instant::now();
        let targets: Vec<Arc<Recorder>> = (0..2)
            .map(|_| {
                Arc::new(Recorder {
                    seen: Mutex::new(Vec::new()),
                    start,
                })
            })
            .collect();
        let schedule = vec![
            Scheduled {
                time: 0.0,
                host: 0,
                event: OwnerEvent::Arrive,
            },
            Scheduled {
                time: 60.0,
                host: 1,
                event: OwnerEvent::Arrive,
            },
            Scheduled {
                time: 120.0,
                host: 0,
                event: OwnerEvent::Leave,
            },
            Scheduled {
                time: 130.0,
                host: 7,
                event: OwnerEvent::Leave,
            },
        ];
        let (_tx, rx) = watch::channel(false);
        let r = drive(schedule.into_iter(), &targets, 60.0, start, rx).await;
        assert_eq!(
            r,
            DriveReport {
                delivered: 3,
                refused: 1
            }
        );
        let h0 = targets[0].seen.lock().unwrap().clone();
        assert_eq!(
            h0,
            [
                (Duration::ZERO, OwnerEvent::Arrive),
                (Duration::from_secs(2), OwnerEvent::Leave)
            ]
        );
        let h1 = targets[1].seen.lock().unwrap().clone();
        assert_eq!(h1, [(Duration::from_secs(1), OwnerEvent::Arrive)]);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_ends_the_run_before_later_events() {
        let start = Instant::now();
        let t = Arc::new(Recorder {
            seen: Mutex::new(Vec::new()),
            start,
        });
        let schedule = (0..10).map(|i| Scheduled {
            time: f64::from(i) * 100.0,
            host: 0,
            event: OwnerEvent::Arrive,
        });
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = tx.send(true);
        });
        let r = drive(schedule, &[t], 1000.0, start, rx).await;
        // Events at 0, 100 ms and 200 ms; the one at 300 ms is after the stop.
        assert_eq!(r.delivered, 3);
    }
}
