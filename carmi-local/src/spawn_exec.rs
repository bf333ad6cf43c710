//! How a job's child is started once its command is ready: in its own
//! session and cgroup, dying with the local RM, and retried while another
//! thread's fork briefly holds the freshly written executable.
//!
//! Kept apart from `spawn.rs` (the launcher, its sandboxes and waiting
//! threads) so that each file stays readable.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

/// Has the child of `cmd` enter its cgroup (`entry_fds`, which must outlive
/// the spawn) and its own session, and die with the local RM.
pub(super) fn in_own_session(cmd: &mut Command, entry_fds: Vec<i32>) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: write, setsid, prctl and getppid are async-signal-safe and
    // touch no memory of the parent; `entry_fds` outlives the spawn.
    unsafe {
        cmd.pre_exec(move || {
            // First, so that nothing of the job runs outside its cgroup.
            crate::cgroup::enter(&entry_fds)?;
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The process dies with the local RM (SIGKILLed or crashed),
            // rather than run on unwatched; what it started is left to
            // the next run's sweep of the group records.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            // The daemon died before the line above took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the local RM died during the start"));
            }
            Ok(())
        });
    }
}

/// `Command::spawn`, retried on ETXTBSY: another thread may be forking at
/// the moment we closed the freshly written executable, and its child holds a
/// copy of our write descriptor until it execs.
pub(super) fn spawn_retrying(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}
