//! Tests of [`super`]: real processes in temporary sandboxes.

use super::*;
use crate::sandbox::sandbox_file_name;
use crate::test_dir::TempDir;
use std::sync::mpsc;
use std::time::Instant;

#[test]
fn alive_is_false_for_a_zombie_and_for_a_reaped_process() {
    assert!(alive(std::process::id() as i32));
    let mut child = Command::new("true").spawn().expect("run true");
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "`true` did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Not reaped yet: a zombie, which counts as dead.
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    child.wait().expect("reap");
    assert!(!alive(pid));
}

fn shell(process: u64, script: &str) -> LaunchSpec {
    LaunchSpec {
        process: ProcessId(process),
        job: JobId(7),
        host: HostId(3),
        name: "sh".into(),
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: Vec::new(),
        stdio: (None, None),
        capture: Capture::Files,
        input_files: Vec::new(),
        return_files: Vec::new(),
        input_copies: Vec::new(),
        credential: None,
        requests: Default::default(),
    }
}

/// Kills the group when a test ends, even by a failed assertion, so that
/// no stopped process outlives the test binary.
struct Guard(ProcessGroup);

impl std::ops::Deref for Guard {
    type Target = ProcessGroup;
    fn deref(&self) -> &ProcessGroup {
        &self.0
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.kill_now();
    }
}

fn launch(l: &Launcher, spec: &LaunchSpec) -> (Guard, mpsc::Receiver<ExitReport>) {
    let (tx, rx) = mpsc::channel();
    let g = l
        .launch(spec, move |r| {
            let _ = tx.send(r);
        })
        .unwrap()
        .group;
    (Guard(g), rx)
}

/// Live (non-zombie) processes whose process group is `pgid`.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which is in parentheses and may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
            out.push(pid);
        }
    }
    out
}

/// Members of group `pgid` that are running `sleep` (a shell that has only
/// forked may still be blocked in vfork, unable to stop).
fn sleeps(pgid: i32) -> usize {
    live_members(pgid)
        .into_iter()
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
        .count()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn kill_reaches_the_whole_process_group() {
    let dir = TempDir::new("pgkill");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let (g, rx) = launch(&l, &shell(1, "sleep 100 & sleep 100"));
    wait_until("both sleeps", || sleeps(g.pgid()) == 2);
    let t = Instant::now();
    g.terminate(Duration::from_secs(2)).await;
    assert!(t.elapsed() < Duration::from_secs(1), "SIGTERM was enough");
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, ExitStatus::Signal(libc::SIGTERM));
    wait_until("the group to die", || live_members(g.pgid()).is_empty());
    assert!(!g.signal(libc::SIGTERM), "no signal after reaping");
    assert!(!l.sandbox_dir(ProcessId(1)).exists());
}

#[tokio::test]
async fn sigterm_ignorers_get_sigkill_after_the_grace_period() {
    let dir = TempDir::new("pgkill2");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let (g, rx) = launch(&l, &shell(2, "trap '' TERM; sleep 100 & sleep 100"));
    wait_until("both sleeps", || sleeps(g.pgid()) == 2);
    let t = Instant::now();
    g.terminate(Duration::from_millis(300)).await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, ExitStatus::Signal(libc::SIGKILL));
    wait_until("the group to die", || live_members(g.pgid()).is_empty());
}

#[test]
fn children_left_behind_die_with_the_process() {
    let dir = TempDir::new("leftover");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let (g, rx) = launch(&l, &shell(3, "sleep 100 & exit 0"));
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, ExitStatus::Code(0));
    wait_until("the background sleep to die", || {
        live_members(g.pgid()).is_empty()
    });
}

#[test]
fn cpu_time_of_a_busy_child_is_reported() {
    let dir = TempDir::new("cpu");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    // The work happens in a grandchild that the shell waits for: its CPU
    // time reaches us through the shell's rusage.
    let script = r#"sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'; exit 4"#;
    let (_g, rx) = launch(&l, &shell(4, script));
    let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(r.status, ExitStatus::Code(4));
    assert!(r.cpu_seconds > 0.05, "cpu {}", r.cpu_seconds);
}

#[test]
fn environment_sandbox_and_outputs() {
    let dir = TempDir::new("env");
    let l = Launcher::new(
        dir.path().to_path_buf(),
        vec![("CARMI_LOCAL".into(), "127.0.0.1:9".into())],
    );
    let script =
        "echo $CARMI_JOB $CARMI_PROCESS $CARMI_HOST $CARMI_LOCAL; pwd; echo oops >&2; exit 3";
    let (_g, rx) = launch(&l, &shell(5, script));
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, ExitStatus::Code(3));
    let out = fs::read_to_string(dir.path().join("output/7/5.out")).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("7 5 3 127.0.0.1:9"));
    assert!(lines.next().unwrap().ends_with("/sandbox/5"), "{out}");
    let err = fs::read_to_string(dir.path().join("output/7/5.err")).unwrap();
    assert_eq!(err, "oops\n");
    assert!(!l.sandbox_dir(ProcessId(5)).exists());
}

#[tokio::test]
async fn suspend_and_resume_stop_and_continue_the_group() {
    let dir = TempDir::new("stop");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let (g, rx) = launch(&l, &shell(6, "sleep 100 & sleep 100"));
    wait_until("both sleeps", || sleeps(g.pgid()) == 2);
    let states = |pgid: i32| -> Vec<String> {
        live_members(pgid)
            .into_iter()
            .filter_map(|p| {
                let s = fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string())
            })
            .collect()
    };
    assert!(g.suspend());
    wait_until("all stopped", || states(g.pgid()).iter().all(|s| s == "T"));
    assert!(g.resume());
    wait_until("all running", || states(g.pgid()).iter().all(|s| s != "T"));
    // Killing a stopped group works too.
    g.suspend();
    g.terminate(Duration::from_secs(2)).await;
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap().status,
        ExitStatus::Signal(libc::SIGTERM)
    );
}

#[test]
fn unusable_names_and_missing_programs() {
    assert_eq!(sandbox_file_name("../../bin/evil"), "evil");
    assert_eq!(sandbox_file_name(".."), "program");
    assert_eq!(sandbox_file_name("stdout"), "stdout.exe");
    let dir = TempDir::new("missing");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let mut spec = shell(8, "true");
    spec.program = dir.path().join("nope");
    assert!(matches!(
        l.launch(&spec, |_| {}),
        Err(SpawnError::Sandbox { .. })
    ));
    // A script whose interpreter does not exist fails at exec.
    let junk = dir.path().join("junk");
    fs::write(&junk, b"#!/nonexistent/interpreter\n").unwrap();
    spec.program = junk;
    let err = l.launch(&spec, |_| {}).unwrap_err();
    assert!(matches!(err, SpawnError::Exec { .. }), "{err}");
    assert!(
        !l.sandbox_dir(ProcessId(8)).exists(),
        "failed launches leave no sandbox"
    );
}

/// Shutdown's gate: once closed, nothing starts, and every process that
/// did start (its launch reported or not, from any clone) is listed.
#[test]
fn a_closed_launcher_starts_nothing_and_lists_what_it_started() {
    let dir = TempDir::new("close");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let clone = l.clone();
    let (g, rx) = launch(&clone, &shell(9, "sleep 100"));
    let (_done, done_rx) = launch(&l, &shell(10, "true"));
    done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let listed = l.close();
    assert_eq!(listed.len(), 1, "only the live process is listed");
    assert_eq!(listed[0].0, ProcessId(9));
    assert_eq!(listed[0].1.pgid(), g.pgid());
    let err = clone.launch(&shell(11, "true"), |_| {}).unwrap_err();
    assert!(matches!(err, SpawnError::Closed), "{err}");
    assert!(!l.sandbox_dir(ProcessId(11)).exists());
    listed[0].1.kill_now();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap().status,
        ExitStatus::Signal(libc::SIGKILL)
    );
}

/// The parent-death signal is tied to the thread that forks: a process
/// launched from a thread that then ends (as tokio retires idle blocking
/// threads) must keep running, and die only when it is killed.
#[test]
fn a_process_outlives_the_thread_that_launched_it() {
    let dir = TempDir::new("pdeathsig");
    let l = Launcher::new(dir.path().to_path_buf(), vec![]);
    let (tx, rx) = mpsc::channel();
    let launcher = l.clone();
    let group = std::thread::spawn(move || {
        launcher
            .launch(&shell(12, "sleep 100"), move |r| {
                let _ = tx.send(r);
            })
            .unwrap()
            .group
    })
    .join()
    .unwrap();
    let g = Guard(group);
    wait_until("the sleep", || sleeps(g.pgid()) == 1);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        rx.try_recv().is_err(),
        "the process ended with its launching thread"
    );
    assert_eq!(sleeps(g.pgid()), 1);
    // While it runs its group is on record, for a restarted daemon to find.
    let record = dir.path().join("groups").join(g.pgid().to_string());
    assert!(record.exists(), "no record at {}", record.display());
    g.kill_now();
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, ExitStatus::Signal(libc::SIGKILL));
    wait_until("the record to go", || !record.exists());
}
