//! End to end, `carmi logs` (issue 20, item 4): a running job's master's
//! standard output and error, read on the machine the global RM placed it
//! on, from a submit directory outside the pool. Without `-f` it prints
//! what there is and exits; `-f` prints everything once and exits 0 when
//! the job ends; after the end, what came back is printed. The master
//! waits on a file the test creates, so nothing depends on timing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use carmi_tests::{Pool, text, write_script};

/// A pool of one machine and a submit directory `dir` in its folder.
fn start(name: &str, dir: &str) -> (Pool, PathBuf) {
    let pool = Pool::start(name, 1, &[vec![]]);
    let dir = pool.dir.join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    (pool, dir)
}

/// A master script that runs `before`, waits for the file `gate`, then
/// runs `after`: the test decides when it goes on.
fn gated(before: &str, gate: &Path, after: &str) -> String {
    format!(
        "#!/bin/sh\n{before}while [ ! -e {g} ]; do sleep 0.05; done\n{after}",
        g = gate.display()
    )
}

#[test]
fn logs_shows_a_running_masters_output_and_follows_it_to_the_end() {
    let (pool, dir) = start("logs", "laptop");
    let gate = dir.join("go");
    let master = gated(
        "echo first\necho 'a warning' >&2\n",
        &gate,
        "echo second\nexit 0\n",
    );
    let submit = "executable = master.sh\noutput = out.txt\nerror = err.txt\nqueue\n";
    let job = pool.submit_script(&dir, &master, submit);
    let job = job.as_str();

    // While it runs: the first line, and no more.
    let first = pool.wait_for("output while it runs", Duration::from_secs(30), || {
        let out = pool.carmi_in(&dir).args(["logs", job]).output().unwrap();
        if out.status.success() && !out.stdout.is_empty() {
            Ok(text(&out.stdout))
        } else {
            Err(text(&out.stderr))
        }
    });
    assert_eq!(first, "first\n");
    let err = pool.run_ok(pool.carmi_in(&dir).args(["logs", "--stderr", job]));
    assert_eq!(err, "a warning\n");

    // Following: the first line at once, the second once the gate opens,
    // each once, and the command ends with the job.
    let mut follow = pool
        .carmi_in(&dir)
        .args(["logs", "-f", job])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&gate, "").unwrap();
    let what = "carmi logs -f (with the job)";
    let status = pool.wait_exit(&mut follow, what, Duration::from_secs(60));
    let mut out = String::new();
    follow
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    follow
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}\n{}", pool.logs());
    assert_eq!(out, "first\nsecond\n", "stderr: {err}");

    // After the end: what came back with the job.
    let after = pool.run_ok(pool.carmi_in(&dir).args(["logs", job]));
    assert_eq!(after, "first\nsecond\n");
}

#[test]
fn logs_of_an_unknown_job_says_so() {
    let (pool, dir) = start("logs-unknown", "laptop");
    let out = pool.carmi_in(&dir).args(["logs", "j99"]).output().unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("job 99 is not in the queue or the history"),
        "{err}"
    );
}

#[test]
fn logs_reads_a_pinned_masters_output_file_on_its_machine() {
    let (pool, dir) = start("logs-pinned", "submit");
    let gate = dir.join("go");
    let master = gated("echo pinned\n", &gate, "");
    write_script(&dir.join("master.sh"), &master);
    std::fs::write(
        dir.join("job.sub"),
        "executable = master.sh\noutput = out.txt\nqueue\n",
    )
    .unwrap();
    // Pinned to m0: its output goes straight to out.txt, read there.
    let job = pool.run_ok(
        pool.carmi_in(&dir)
            .env("CARMI_MACHINE", "m0")
            .args(["submit", "job.sub"]),
    );
    let job = job.trim();
    pool.wait_for("output while it runs", Duration::from_secs(30), || {
        let out = pool.carmi_in(&dir).args(["logs", job]).output().unwrap();
        if out.status.success() && text(&out.stdout) == "pinned\n" {
            Ok(())
        } else {
            Err(format!("{:?} {}", text(&out.stdout), text(&out.stderr)))
        }
    });
    std::fs::write(&gate, "").unwrap();
    let out = pool.wait_job(&dir, job, 60);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Ended, and nothing was sent back (it wrote out.txt in place): said so.
    let out = pool.carmi_in(&dir).args(["logs", job]).output().unwrap();
    assert!(out.status.success() && out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(
        err.contains("has ended") && err.contains("keeps no copy"),
        "{err}"
    );
}

#[test]
fn logs_follow_waits_for_a_held_master_and_follows_it_once_released() {
    use std::io::BufRead;
    let (pool, dir) = start("logs-held", "laptop");
    let gate = dir.join("go");
    let master = gated("echo run\n", &gate, "");
    let job = pool.submit_script(&dir, &master, "executable = master.sh\nqueue\n");
    let job = job.as_str();
    pool.run_ok(pool.carmi_in(&dir).args(["hold", job]));
    let mut follow = pool
        .carmi_in(&dir)
        .args(["logs", "-f", job])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says why it waits, and waits (an error would end it instead).
    let mut err = std::io::BufReader::new(follow.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(
        line.contains("has not started yet") && line.ends_with("; waiting\n"),
        "{line:?}"
    );
    assert!(follow.try_wait().unwrap().is_none(), "it keeps waiting");
    pool.run_ok(pool.carmi_in(&dir).args(["release", job]));
    // The new master's line, while it runs (no `output =`: nothing of it
    // would be kept once it ended).
    let mut stdout = std::io::BufReader::new(follow.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "run\n");
    std::fs::write(&gate, "").unwrap();
    let what = "carmi logs -f (with the job)";
    let status = pool.wait_exit(&mut follow, what, Duration::from_secs(60));
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{}", pool.logs());
    assert_eq!(rest, "", "each line once");
}
