//! End to end, `carmi logs` (issue 20, item 4): a running job's master's
//! standard output and error, read on the machine the global RM placed it
//! on, from a submit directory outside the pool. Without `-f` it prints
//! what there is and exits; `-f` prints everything once and exits 0 when
//! the job ends; after the end, what came back is printed. The master
//! waits on a file the test creates, so nothing depends on timing.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::{Pool, text};

/// `carmi` as on a laptop: no machine named, no config file.
fn carmi(pool: &Pool, dir: &Path) -> Command {
    let mut cmd = pool.carmi();
    cmd.current_dir(dir);
    cmd
}

fn ok(out: Output, pool: &Pool) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    text(&out.stdout)
}

#[test]
fn logs_shows_a_running_masters_output_and_follows_it_to_the_end() {
    let pool = Pool::start("logs", 1, &[vec![]]);
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    let gate = dir.join("go");
    {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("master.sh");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho first\necho 'a warning' >&2\nwhile [ ! -e {g} ]; do sleep 0.05; done\necho second\nexit 0\n",
                g = gate.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        dir.join("job.sub"),
        "executable = master.sh\noutput = out.txt\nerror = err.txt\nqueue\n",
    )
    .unwrap();
    let job = ok(
        carmi(&pool, &dir)
            .args(["submit", "job.sub"])
            .output()
            .unwrap(),
        &pool,
    );
    let job = job.trim();

    // While it runs: the first line, and no more.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let out = carmi(&pool, &dir).args(["logs", job]).output().unwrap();
        if out.status.success() && !out.stdout.is_empty() {
            break text(&out.stdout);
        }
        assert!(
            Instant::now() < deadline,
            "no output while it runs: {}\n{}",
            text(&out.stderr),
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(first, "first\n");
    let err = ok(
        carmi(&pool, &dir)
            .args(["logs", "--stderr", job])
            .output()
            .unwrap(),
        &pool,
    );
    assert_eq!(err, "a warning\n");

    // Following: the first line at once, the second once the gate opens,
    // each once, and the command ends with the job.
    let mut follow = carmi(&pool, &dir)
        .args(["logs", "-f", job])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&gate, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = follow.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = follow.kill();
            panic!("carmi logs -f did not end with the job\n{}", pool.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
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
    let after = ok(
        carmi(&pool, &dir).args(["logs", job]).output().unwrap(),
        &pool,
    );
    assert_eq!(after, "first\nsecond\n");
}

#[test]
fn logs_of_an_unknown_job_says_so() {
    let pool = Pool::start("logs-unknown", 1, &[vec![]]);
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    let out = carmi(&pool, &dir).args(["logs", "j99"]).output().unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("job 99 is not in the queue or the history"),
        "{err}"
    );
}

#[test]
fn logs_reads_a_pinned_masters_output_file_on_its_machine() {
    let pool = Pool::start("logs-pinned", 1, &[vec![]]);
    let dir = pool.dir.join("submit");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    let gate = dir.join("go");
    {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("master.sh");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho pinned\nwhile [ ! -e {g} ]; do sleep 0.05; done\n",
                g = gate.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        dir.join("job.sub"),
        "executable = master.sh\noutput = out.txt\nqueue\n",
    )
    .unwrap();
    // Pinned to m0: its output goes straight to out.txt, read there.
    let job = ok(
        carmi(&pool, &dir)
            .env("CARMI_MACHINE", "m0")
            .args(["submit", "job.sub"])
            .output()
            .unwrap(),
        &pool,
    );
    let job = job.trim();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = carmi(&pool, &dir).args(["logs", job]).output().unwrap();
        if out.status.success() && text(&out.stdout) == "pinned\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no output while it runs: {:?} {}\n{}",
            text(&out.stdout),
            text(&out.stderr),
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&gate, "").unwrap();
    let out = carmi(&pool, &dir)
        .args(["wait", job, "--timeout", "60"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Ended, and nothing was sent back (it wrote out.txt in place): said so.
    let out = carmi(&pool, &dir).args(["logs", job]).output().unwrap();
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
    let pool = Pool::start("logs-held", 1, &[vec![]]);
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    let gate = dir.join("go");
    {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("master.sh");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho run\nwhile [ ! -e {g} ]; do sleep 0.05; done\n",
                g = gate.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(dir.join("job.sub"), "executable = master.sh\nqueue\n").unwrap();
    let job = ok(
        carmi(&pool, &dir)
            .args(["submit", "job.sub"])
            .output()
            .unwrap(),
        &pool,
    );
    let job = job.trim();
    ok(
        carmi(&pool, &dir).args(["hold", job]).output().unwrap(),
        &pool,
    );
    let mut follow = carmi(&pool, &dir)
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
    ok(
        carmi(&pool, &dir).args(["release", job]).output().unwrap(),
        &pool,
    );
    // The new master's line, while it runs (no `output =`: nothing of it
    // would be kept once it ended).
    let mut stdout = std::io::BufReader::new(follow.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "run\n");
    std::fs::write(&gate, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = follow.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = follow.kill();
            panic!("carmi logs -f did not end with the job\n{}", pool.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{}", pool.logs());
    assert_eq!(rest, "", "each line once");
}
