//! Progress of a cycle-by-cycle run on the terminal.
//!
//! On a terminal, one bar for the running cycle shows the steps returned and
//! what the pool looks like now (hosts held, busy, suspended), redrawn as
//! the WoDi server reports changes; every finished cycle leaves a permanent
//! line above the bar. When stdout is not a terminal (a log file, CI), only
//! the permanent lines are printed, so the output stays plain text. Every
//! line fits in 80 columns.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;
use wodi::Status;

/// The progress display of one run.
pub struct CycleProgress {
    cycles: u64,
    bar: Option<ProgressBar>,
    status: watch::Receiver<Status>,
    started: Instant,
    cycle_started: Instant,
    steps_done: u64,
    steps_total: u64,
    /// Stops the task that follows status reports.
    follow: Option<tokio::task::JoinHandle<()>>,
}

/// `hosts 14 (10 busy, 2 susp.)`: the pool as the run sees it.
pub fn hosts_summary(st: &Status) -> String {
    format!(
        "hosts {:>2} ({:>2} busy, {} susp.)",
        st.hosts, st.busy, st.suspended
    )
}

/// The permanent line of a finished cycle: `(cycle, cycles)` 1-based,
/// its duration, `(steps done, steps in all)`, the pool, the run's elapsed time.
fn cycle_line(
    (cycle, cycles): (u64, u64),
    took: Duration,
    (done, total): (u64, u64),
    st: &Status,
    elapsed: Duration,
) -> String {
    format!(
        "cycle {cycle:>3}/{cycles} {:>6.2} s  steps {done:>4}/{total}  {} {:>5.1} s",
        took.as_secs_f64(),
        hosts_summary(st),
        elapsed.as_secs_f64(),
    )
}

/// The live bar's template; its fixed parts and the message stay within 80 columns.
const BAR_TEMPLATE: &str = "{prefix} [{bar:20}] {pos:>2}/{len:<2} {msg} {elapsed:>4}";

impl CycleProgress {
    /// A display for `cycles` cycles of `steps_total` steps in all, following
    /// the status reports of `status` (from [`wodi::master::Master::watch_status`]).
    /// Draws a live bar only when stdout is a terminal.
    pub fn new(cycles: u64, steps_total: u64, status: watch::Receiver<Status>) -> CycleProgress {
        let target = std::io::stdout()
            .is_terminal()
            .then(ProgressDrawTarget::stdout);
        CycleProgress::drawn_on(target, cycles, steps_total, status)
    }

    /// [`CycleProgress::new`] with the bar drawn on `target` (none: no bar).
    /// While the bar is up, the WoDi server's log lines are printed above
    /// it (the bar cleared, the line written, the bar drawn again), never
    /// through it.
    fn drawn_on(
        target: Option<ProgressDrawTarget>,
        cycles: u64,
        steps_total: u64,
        status: watch::Receiver<Status>,
    ) -> CycleProgress {
        let bar = target.map(|target| {
            let bar = ProgressBar::with_draw_target(Some(0), target);
            let above = bar.clone();
            wodi::server_log::set_sink(Some(Arc::new(move |line: &str| {
                above.suspend(|| eprintln!("{line}"))
            })));
            bar.set_style(
                ProgressStyle::with_template(BAR_TEMPLATE)
                    .expect("the template is valid")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let follow = bar.as_ref().map(|bar| {
            let bar = bar.clone();
            let mut rx = status.clone();
            tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    let st = *rx.borrow_and_update();
                    bar.set_message(hosts_summary(&st));
                }
            })
        });
        CycleProgress {
            cycles,
            bar,
            status,
            started: Instant::now(),
            cycle_started: Instant::now(),
            steps_done: 0,
            steps_total,
            follow,
        }
    }

    /// Cycle `cycle` (0-based) begins with `steps` steps.
    pub fn begin(&mut self, cycle: u64, steps: u64) {
        self.cycle_started = Instant::now();
        if let Some(bar) = &self.bar {
            bar.reset();
            bar.set_length(steps);
            bar.set_position(0);
            bar.set_prefix(format!("cycle {:>3}/{}", cycle + 1, self.cycles));
            bar.set_message(hosts_summary(&self.status.borrow()));
        }
    }

    /// One step of the current cycle has returned.
    pub fn step_done(&mut self) {
        self.steps_done += 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// The current cycle (0-based `cycle`) has ended: prints its permanent line.
    pub fn end(&mut self, cycle: u64) {
        let st = *self.status.borrow();
        let line = cycle_line(
            (cycle + 1, self.cycles),
            self.cycle_started.elapsed(),
            (self.steps_done, self.steps_total),
            &st,
            self.started.elapsed(),
        );
        match &self.bar {
            Some(bar) => bar.println(line),
            None => crate::say(&line),
        }
    }

    /// Removes the bar (the permanent lines stay).
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(f) = self.follow.take() {
            f.abort();
        }
        if let Some(bar) = self.bar.take() {
            wodi::server_log::set_sink(None);
            bar.finish_and_clear();
        }
    }
}

impl Drop for CycleProgress {
    fn drop(&mut self) {
        // An interrupted run must not leave a half-drawn bar behind.
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest() -> Status {
        Status {
            hosts: 99,
            busy: 99,
            suspended: 99,
            ..Status::default()
        }
    }

    #[test]
    fn a_cycle_line_fits_in_80_columns_and_names_the_pool() {
        let line = cycle_line(
            (999, 999),
            Duration::from_secs_f64(999.99),
            (99_999, 99_999),
            &widest(),
            Duration::from_secs(9_999),
        );
        assert!(line.len() <= 80, "{} columns: {line}", line.len());
        assert!(line.contains("hosts 99 (99 busy, 99 susp.)"), "{line}");
        assert!(line.starts_with("cycle 999/999"), "{line}");
    }

    #[test]
    fn a_server_log_line_clears_the_bar_and_the_bar_is_drawn_again_after_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_rt = rt.enter();
        let (_tx, rx) = watch::channel(Status::default());
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
        let mut progress = CycleProgress::drawn_on(Some(target), 3, 30, rx);
        progress.begin(0, 10);
        progress.bar.as_ref().unwrap().tick();
        screen.ops.lock().unwrap().clear();
        wodi::server_log::show("WARN wodi_core::run::carmi: a line of the server's");
        let ops = screen.ops.lock().unwrap().clone();
        let cleared = ops.iter().position(|o| o == "clear");
        let drawn = ops.iter().rposition(|o| o.contains("cycle   1/3"));
        assert!(
            matches!((cleared, drawn), (Some(c), Some(d)) if c < d),
            "the bar must be cleared before the line and drawn after it: {ops:?}"
        );
        progress.finish();
        screen.ops.lock().unwrap().clear();
        wodi::server_log::show("WARN after the bar");
        assert!(
            screen.ops.lock().unwrap().is_empty(),
            "a line after the bar is gone touches no bar"
        );
    }

    /// A terminal that records what is drawn on it.
    #[derive(Debug, Default, Clone)]
    struct Screen {
        ops: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Screen {
        fn op(&self, what: &str) -> std::io::Result<()> {
            self.ops.lock().unwrap().push(what.to_string());
            Ok(())
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            self.op("up")
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            self.op("down")
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            self.op("right")
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            self.op("left")
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.op(s)
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.op(s)
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.op("clear")
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_bar_fits_in_80_columns() {
        // Render each placeholder at its widest: prefix "cycle 999/999",
        // counts "99/99", elapsed "999s".
        let line = BAR_TEMPLATE
            .replace("{prefix}", "cycle 999/999")
            .replace("{bar:20}", &"=".repeat(20))
            .replace("{pos:>2}", "99")
            .replace("{len:<2}", "99")
            .replace("{msg}", &hosts_summary(&widest()))
            .replace("{elapsed:>4}", "999s");
        assert!(
            !line.contains('{'),
            "a placeholder was not rendered: {line}"
        );
        assert!(line.len() <= 80, "{} columns: {line}", line.len());
    }
}
