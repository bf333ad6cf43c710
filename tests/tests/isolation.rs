//! End to end, over real daemons: a local RM started as root runs each job
//! as a slot user of its own (`carmi_local::isolation`), so that a job can
//! read neither the local RM's key and token files, nor its state
//! directory, nor another job's sandbox, while it still runs to the end and
//! its output comes back.
//!
//! Needs root: elsewhere it prints `SKIP ...` and passes, unless
//! `CARMI_CI_REQUIRE_SERVICES=1` (CI, which runs as root), where it fails.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use carmi_tests::{Pool, PoolOptions, root_ready, text, write_script};

/// EACCES: what the kernel answers an account without the permission.
const EACCES: i64 = 13;

/// Waits for the sandbox holding `file` under `work_dir/sandbox`.
fn sandbox_with(pool: &Pool, work_dir: &Path, file: &str) -> PathBuf {
    let what = format!("a sandbox holding {file}");
    pool.wait_for(&what, Duration::from_secs(90), || {
        std::fs::read_dir(work_dir.join("sandbox"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join(file).is_file())
            .ok_or_else(|| "none yet".to_string())
    })
}

#[test]
fn a_job_of_a_root_local_rm_cannot_read_its_keys_nor_another_jobs_sandbox() {
    if !root_ready("a_job_of_a_root_local_rm_cannot_read_its_keys_nor_another_jobs_sandbox") {
        return;
    }
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        local_settings: "slot_user_prefix = \"carmi-iso\"\n".into(),
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("isolation", 2, &[vec![]], options);
    let work_dir = pool.dir.join(&pool.locals[0].name);
    let token = pool.dir.join(format!("{}.token", pool.locals[0].name));
    let submit_dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&submit_dir).unwrap();
    pool.wait_registered();

    // Job A keeps a file of its own in its sandbox and waits.
    write_script(
        &submit_dir.join("hold.sh"),
        "#!/bin/sh\necho \"job A's own data\" > mine.txt\nsleep 300\n",
    );
    std::fs::write(
        submit_dir.join("a.sub"),
        "executable = hold.sh\noutput = hold.out\nqueue\n",
    )
    .unwrap();
    let job_a = pool.run_ok(pool.carmi_in(&submit_dir).args(["submit", "a.sub"]));
    let a_sandbox = sandbox_with(&pool, &work_dir, "mine.txt");
    let a_owner = std::fs::metadata(&a_sandbox).unwrap().uid();
    assert_ne!(a_owner, 0, "job A's sandbox belongs to root");

    // Job B tries to read what it must not, and what it may.
    let forbidden: Vec<PathBuf> = vec![
        pool.secret_path.clone(),
        token.clone(),
        pool.dir.join("pool.key"),
        work_dir.clone(),
        work_dir.join("cache"),
        work_dir.join("output"),
        work_dir.join("groups"),
        work_dir.join("sandbox"),
        a_sandbox.clone(),
        a_sandbox.join("mine.txt"),
        a_sandbox.join(".carmi-credential"),
        a_sandbox.join("stdout"),
    ];
    for path in &forbidden[..forbidden.len() - 1] {
        assert!(path.exists(), "{} is not there to be read", path.display());
    }
    let allowed = [
        ".".to_string(),
        ".carmi-credential".to_string(),
        work_dir.join("machine.ad").display().to_string(),
    ];
    let peek = env!("CARGO_BIN_EXE_carmi-peek");
    let args: Vec<String> = forbidden
        .iter()
        .map(|p| p.display().to_string())
        .chain(allowed.iter().cloned())
        .collect();
    std::fs::write(
        submit_dir.join("b.sub"),
        format!(
            "executable = {peek}\narguments = {}\noutput = peek.out\nerror = peek.err\nqueue\n",
            args.join(" ")
        ),
    )
    .unwrap();
    let job_b = pool.run_ok(pool.carmi_in(&submit_dir).args(["submit", "b.sub"]));
    // A normal job still runs to the end, and its output comes back.
    let out = pool.wait_job(&submit_dir, job_b.trim(), 120);
    let report = std::fs::read_to_string(submit_dir.join("peek.out")).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "job B ran to the end\n{}\n{report}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    let mut lines = report.lines().map(|l| {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
    });
    let me = lines
        .next()
        .unwrap_or_else(|| panic!("no report came back\n{}", pool.logs()));
    let b_uid: u32 = me["uid"][0].as_str().unwrap_or("0").parse().unwrap();
    assert!(
        b_uid != 0 && b_uid != a_owner,
        "job B runs as {me} (job A as {a_owner})"
    );
    assert!(
        me["user"].as_str().unwrap_or("").starts_with("carmi-iso"),
        "{me}"
    );
    assert_eq!(
        me["groups"],
        serde_json::json!([]),
        "root's groups were dropped: {me}"
    );
    let results: Vec<serde_json::Value> = lines.collect();
    assert_eq!(results.len(), args.len(), "{report}");
    for (r, path) in results.iter().zip(&args) {
        assert_eq!(r["path"].as_str(), Some(path.as_str()), "{report}");
        let want = if allowed.contains(path) { 0 } else { EACCES };
        assert_eq!(r["errno"].as_i64(), Some(want), "reading {path}: {r}");
    }

    // Removing job A cleans up after its account too.
    pool.run_ok(pool.carmi_in(&submit_dir).args(["rm", job_a.trim()]));
    let what = "job A's sandbox to go with it";
    pool.wait_until(what, Duration::from_secs(30), || !a_sandbox.exists());
}

/// A local RM started as an ordinary user says at start-up, once, which
/// isolation it cannot give. As root, the test runs it as `nobody` (with a
/// copy of the executable and files of its own); otherwise as the test's user.
#[test]
fn a_local_rm_of_an_ordinary_user_says_once_what_isolation_it_cannot_give() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let dir = carmi_tests::TempDir::new("isolation-plain");
    let own = dir.path().join("own");
    std::fs::create_dir_all(&own).unwrap();
    // SAFETY: geteuid has no failure and no memory effects.
    let root = unsafe { libc::geteuid() } == 0;
    let nobody = 65534;
    let secret = own.join("pool.secret");
    carmi_api::files::write_private(
        &secret,
        &carmi_api::handshake::Secret::generate_text(),
        false,
    )
    .unwrap();
    let mut exe = carmi_tests::bin_dir().join("carmi-local");
    if root {
        let copy = dir.path().join("carmi-local");
        std::fs::copy(&exe, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe = copy;
        for p in [&own, &secret] {
            std::os::unix::fs::chown(p, Some(nobody), Some(nobody)).unwrap();
        }
    }
    let log = dir.path().join("local.log");
    let mut cmd = Command::new(&exe);
    cmd.args(["--global", "127.0.0.1:9", "--secret"])
        .arg(&secret)
        .args([
            "--name",
            "plain",
            "--slots",
            "1",
            "--owner",
            "simulated",
            "--work-dir",
        ])
        .arg(own.join("work"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    if root {
        cmd.uid(nobody).gid(nobody);
    }
    let mut child = cmd.spawn().expect("start carmi-local");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(line.starts_with("listening on "), "{line:?}\n{log}");
    let notices: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("started as the ordinary user"))
        .collect();
    assert_eq!(notices.len(), 1, "{log}");
    for what in [
        "key and token files",
        "other jobs' sandboxes",
        "start it as root",
    ] {
        assert!(notices[0].contains(what), "{what}: {}", notices[0]);
    }
    if root {
        assert!(
            notices[0].contains("`nobody` (uid 65534)"),
            "{}",
            notices[0]
        );
    }
}
