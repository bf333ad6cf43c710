//! The README's "Running a real pool" section, run as the README writes it:
//! its files are written from its code blocks and its commands run from its
//! shell blocks, so that README and code cannot drift apart. Only what must
//! differ on a test machine is substituted: free ports for 9618/9620/9621,
//! `127.0.0.1` for `manager` and `0.0.0.0`, a scratch directory for
//! `/var/lib/carmi`; the install step (`deploy/install.sh`) is skipped and
//! the plain `carmi`, `carmi-global` and `carmi-local` of the commands are
//! the test's own build, put first on the PATH. With
//! `CARMI_README_INSTALLED=1` (CI, after running the README's install step)
//! they are whatever the PATH holds: the installed programs. The commands
//! run in a scratch directory, outside the checkout.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::{bin_dir, scratch};

/// The section, from its heading to the next one.
fn section() -> String {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md");
    let start = text
        .find("## Running a real pool\n")
        .expect("README has a \"Running a real pool\" section");
    let rest = &text[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |e| e);
    rest[..end].to_string()
}

/// Fenced code blocks: (language, body).
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            out.push((lang.to_string(), body.join("\n") + "\n"));
        }
    }
    out
}

/// The file a block holds when its first line is `# NAME.EXT`.
fn file_name(body: &str) -> Option<&str> {
    let first = body.lines().next()?.strip_prefix("# ")?;
    (first.contains('.') && !first.contains(' ')).then_some(first)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
        }
        for c in &mut self.0 {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The PATH the README's commands run with: the test's build first, unless
/// the installed programs are under test.
fn path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    if std::env::var("CARMI_README_INSTALLED").is_ok_and(|v| v == "1") {
        path
    } else {
        format!("{}:{path}", bin_dir().display())
    }
}

fn bash(dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.env("PATH", path())
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .env_remove("CARMI_LOCAL")
        .env_remove("CARMI_MACHINE")
        .env("CARMI_CONFIG", dir.join("no-config.toml"))
        .env("XDG_STATE_HOME", dir.join("state-home"));
    cmd
}

fn logs(dir: &Path) -> String {
    let mut out = String::new();
    for name in ["global.log", "local-0.log", "local-1.log"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        out.push_str(&format!("--- {name}\n{text}"));
    }
    out
}

#[test]
fn the_readmes_real_pool_runs_as_written() {
    let dir = scratch("readme");
    let ports = [
        ("9618", free_port().to_string()),
        ("9620", free_port().to_string()),
        ("9621", free_port().to_string()),
    ];
    let state = dir.join("var-lib-carmi");
    let subst = |text: &str| {
        let mut t = text
            .replace("manager:", "127.0.0.1:")
            .replace("0.0.0.0:", "127.0.0.1:")
            .replace("/var/lib/carmi", &state.display().to_string());
        for (from, to) in &ports {
            t = t.replace(&format!(":{from}"), &format!(":{to}"));
        }
        t
    };

    // The shell blocks' commands, by block.
    let mut commands: Vec<Vec<String>> = Vec::new();
    for (lang, body) in blocks(&section()) {
        match file_name(&body) {
            Some(name) if lang == "toml" || lang == "sh" => {
                let content = body.split_once('\n').map_or("", |(_, rest)| rest);
                std::fs::write(dir.join(name), subst(content)).unwrap();
            }
            _ if lang == "sh" => commands.push(body.lines().map(subst).collect()),
            _ => {}
        }
    }
    // The blocks up to the last that starts a daemon set the pool up, in
    // order (`carmi pool add-machine` between the global RM and the local
    // RMs); the later ones are the daily loop, run once the pool is up.
    let is_daemon = |l: &String| l.starts_with("carmi-global ") || l.starts_with("carmi-local ");
    let setup_blocks = commands
        .iter()
        .rposition(|b| b.iter().any(is_daemon))
        .map_or(0, |i| i + 1);
    let daily: Vec<String> = commands.split_off(setup_blocks).concat();
    let commands: Vec<String> = commands.concat();
    for f in ["local.toml", "server.toml", "job.sub", "hello.sh"] {
        assert!(dir.join(f).is_file(), "the README no longer shows {f}");
    }

    if std::env::var("CARMI_README_INSTALLED").is_ok_and(|v| v == "1") {
        // The installed programs, not a build of this checkout.
        let out = bash(&dir, "command -v carmi carmi-global carmi-local")
            .output()
            .unwrap();
        let found = String::from_utf8_lossy(&out.stdout).into_owned();
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let checkout = checkout.canonicalize().unwrap();
        assert!(
            out.status.success(),
            "CARMI_README_INSTALLED=1, but the PATH lacks carmi, carmi-global or carmi-local: {found}"
        );
        assert!(
            found
                .lines()
                .all(|l| !l.starts_with(&*checkout.to_string_lossy())),
            "the PATH finds programs of the checkout:\n{found}"
        );
    }

    let mut daemons = Daemons(Vec::new());
    // What the set-up exports, for every command after it.
    let mut exports = String::new();
    for line in &commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let program = words
            .first()
            .map_or("", |w| w.rsplit('/').next().unwrap_or(w));
        match program {
            "" | "#" => {}
            _ if line.trim_start().starts_with('#') => {}
            // The install step: the test runs on the build it was made with,
            // or (CARMI_README_INSTALLED) on what CI installed with it.
            "cargo" | "install.sh" => {}
            "carmi-global" | "carmi-local" => {
                let log = if program == "carmi-global" {
                    "global.log".to_string()
                } else {
                    format!("local-{}.log", daemons.0.len() - 1)
                };
                let out = std::fs::File::create(dir.join(&log)).unwrap();
                let child = bash(&dir, &format!("{exports}exec {line}"))
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out)
                    .spawn()
                    .unwrap();
                daemons.0.push(child);
                if program == "carmi-global" {
                    let addr = format!("127.0.0.1:{}", ports[0].1);
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while std::net::TcpStream::connect(&addr).is_err() {
                        assert!(Instant::now() < deadline, "no global RM\n{}", logs(&dir));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            "export" => exports.push_str(&format!("{line}\n")),
            _ => {
                // Set-up: the secret and keys, the machines' and users' tokens.
                let out = bash(&dir, &format!("{exports}{line}")).output().unwrap();
                assert!(
                    out.status.success(),
                    "`{line}` failed: {}\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    logs(&dir)
                );
            }
        }
    }
    let script = format!("set -e\n{}\n", daily.join("\n"));
    assert_eq!(daemons.0.len(), 3, "a global RM and two local RMs");

    // Both machines registered (6 slots) before the daily loop starts.
    let status = format!(
        "carmi status --pool 127.0.0.1:{} --secret pool.secret --token pool.admin.token",
        ports[0].1
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = bash(&dir, &status).output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("2 machines, 6 slots") {
            break;
        }
        assert!(Instant::now() < deadline, "pool not up\n{}", logs(&dir));
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = bash(
        &dir,
        &format!("timeout 120 bash -c {}", shell_quote(&script)),
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the README's commands failed ({:?}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        logs(&dir)
    );
    // status -af: one line per machine; the server lends itself.
    assert!(stdout.contains("compute-01 Unclaimed Idle"), "{stdout}");
    assert!(stdout.contains("lab-pc-07 "), "{stdout}");
    assert!(stdout.contains("completed, exit 0"), "{stdout}");
    assert!(stdout.contains("job 1 ran its master on"), "{stdout}");
    powers_hold(&dir, &ports[0].1);
}

/// The README's pool holds each token to its power (issue 37): bob cannot
/// remove alice's job, and a token that may only read cannot submit.
fn powers_hold(dir: &Path, port: &str) {
    let as_user = |user: &str, cmd: &str| {
        let line = format!(
            "export CARMI_POOL=127.0.0.1:{port} CARMI_SECRET=$PWD/pool.secret CARMI_TOKEN=$PWD/{user}.token; {cmd}"
        );
        bash(dir, &line).output().unwrap()
    };
    std::fs::write(dir.join("nap.sh"), "#!/bin/sh\nsleep 60\n").unwrap();
    std::fs::write(dir.join("nap.sub"), "executable = nap.sh\nqueue\n").unwrap();
    let out = as_user("alice", "chmod +x nap.sh && carmi submit nap.sub");
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !job.is_empty(),
        "alice's second job: {out:?}"
    );
    let out = as_user("bob", &format!("carmi rm {job}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("permission denied"),
        "bob removed alice's job: {err}"
    );
    let out = as_user("pool.admin", "carmi pool add-user --authz read carol");
    assert!(out.status.success(), "{out:?}");
    let out = as_user("carol", "carmi submit nap.sub");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("permission denied"),
        "a reader submitted: {err}"
    );
    let out = as_user("alice", &format!("carmi rm {job}"));
    assert!(
        out.status.success(),
        "alice could not remove her own job: {out:?}"
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
