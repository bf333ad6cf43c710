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
//! run in a scratch directory, outside the checkout, which stands for every
//! machine's (so a bundle written on the manager is already "copied"); each
//! actor the README names in a comment (`# on lab-pc-07`, `# as alice`; the
//! manager otherwise) has a home and a pool directory of its own
//! (`$CARMI_DIR`, which stands for `/etc/carmi` or `~/.config/carmi`), and
//! nothing else: no `CARMI_*` variable, no config file but what the README's
//! commands write.

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

/// `script` run by bash as `actor`: in the scratch directory, with a home
/// and a pool directory of the actor's own and no pool from the environment.
fn bash(dir: &Path, actor: &str, script: &str) -> Command {
    let home = dir.join(format!("home-{actor}"));
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new("bash");
    cmd.env("PATH", path())
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .env_remove("CARMI_TOKEN")
        .env_remove("CARMI_LOCAL")
        .env_remove("CARMI_MACHINE")
        .env_remove("CARMI_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", &home)
        .env("CARMI_DIR", pool_dir(dir, actor))
        .env("XDG_STATE_HOME", home.join("state"));
    cmd
}

/// The actor's pool directory (its `/etc/carmi` or `~/.config/carmi`).
fn pool_dir(dir: &Path, actor: &str) -> std::path::PathBuf {
    dir.join(format!("carmi-dir-{actor}"))
}

/// The actor a comment line names: `# on NAME, ...` or `# as NAME, ...`.
fn actor_of(comment: &str) -> Option<String> {
    let rest = comment
        .strip_prefix("# on ")
        .or(comment.strip_prefix("# as "))?;
    let name = rest.split_whitespace().next()?.trim_end_matches([',', ':']);
    Some(name.to_string())
}

/// True when `line` starts a daemon: the global RM, a local RM, or `carmi
/// join` of a machine's bundle (it becomes that machine's local RM).
fn is_daemon(dir: &Path, line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["carmi-global", ..] | ["carmi-local", ..] => true,
        ["carmi", "join", bundle, ..] => std::fs::read_to_string(dir.join(bundle))
            .is_ok_and(|t| t.contains("kind = \"machine\"")),
        _ => false,
    }
}

fn logs(dir: &Path) -> String {
    let mut out = String::new();
    for name in ["global.log", "local-0.log", "local-1.log", "intruder.log"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        out.push_str(&format!("--- {name}\n{text}"));
    }
    out
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    meta.permissions().mode() & 0o777
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

    // The shell blocks' commands, each with the actor it runs as.
    let mut commands: Vec<Vec<(String, String)>> = Vec::new();
    for (lang, body) in blocks(&section()) {
        match file_name(&body) {
            Some(name) if lang == "toml" || lang == "sh" => {
                let content = body.split_once('\n').map_or("", |(_, rest)| rest);
                std::fs::write(dir.join(name), subst(content)).unwrap();
            }
            _ if lang == "sh" => {
                let mut actor = "manager".to_string();
                let mut block = Vec::new();
                for line in body.lines().map(subst) {
                    match actor_of(&line) {
                        Some(a) => actor = a,
                        None => block.push((actor.clone(), line)),
                    }
                }
                commands.push(block);
            }
            _ => {}
        }
    }
    // The blocks before the one that submits set the pool up, in order
    // (bundles made between the global RM and the joins); from that block
    // on, the daily loop, run once the pool is up.
    let submits = |b: &Vec<(String, String)>| b.iter().any(|(_, l)| l.starts_with("carmi submit"));
    let setup_blocks = commands
        .iter()
        .position(submits)
        .expect("the README submits a job");
    let daily: Vec<(String, String)> = commands.split_off(setup_blocks).concat();
    let commands: Vec<(String, String)> = commands.concat();
    for f in ["local.toml", "server.toml", "job.sub", "hello.sh"] {
        assert!(dir.join(f).is_file(), "the README no longer shows {f}");
    }
    // No more than five commands (the install step aside) set the pool up:
    // issue 37's bound for a manager, two machines and two users.
    let mut distinct: Vec<String> = commands
        .iter()
        .filter(|(_, l)| !l.trim().is_empty() && !l.contains("install.sh"))
        .map(|(_, l)| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .map(|c| c.split(".join").next().unwrap_or("").to_string())
        .map(|c| {
            if c.starts_with("carmi join") {
                "carmi join".into()
            } else {
                c
            }
        })
        .collect();
    distinct.dedup();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() <= 5,
        "more than five set-up commands: {distinct:?}"
    );

    if std::env::var("CARMI_README_INSTALLED").is_ok_and(|v| v == "1") {
        // The installed programs, not a build of this checkout.
        let out = bash(&dir, "manager", "command -v carmi carmi-global carmi-local")
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
    for (actor, line) in &commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let program = words
            .first()
            .map_or("", |w| w.rsplit('/').next().unwrap_or(w));
        match program {
            "" => {}
            _ if line.trim_start().starts_with('#') => {}
            // The install step: the test runs on the build it was made with,
            // or (CARMI_README_INSTALLED) on what CI installed with it.
            "cargo" | "install.sh" => {}
            _ if is_daemon(&dir, line) => {
                let log = if program == "carmi-global" {
                    "global.log".to_string()
                } else {
                    format!("local-{}.log", daemons.0.len() - 1)
                };
                let out = std::fs::File::create(dir.join(&log)).unwrap();
                let child = bash(&dir, actor, &format!("exec {line}"))
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
            _ => {
                // Set-up: the pool's files, the bundles, a user's join.
                let out = bash(&dir, actor, line).output().unwrap();
                assert!(
                    out.status.success(),
                    "`{line}` as {actor} failed: {}\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    logs(&dir)
                );
            }
        }
    }
    assert_eq!(daemons.0.len(), 3, "a global RM and two local RMs");
    files_in_place(&dir);

    // Both machines registered (6 slots) before the daily loop starts, as
    // the manager sees it with no flag and no export.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = bash(&dir, "manager", "carmi status").output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("2 machines, 6 slots") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pool not up: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs(&dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let actors: Vec<&String> = daily.iter().map(|(a, _)| a).collect();
    assert!(
        actors.iter().all(|a| *a == actors[0]),
        "one actor for the daily loop"
    );
    let script = format!(
        "set -e\n{}\n",
        daily
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let out = bash(
        &dir,
        actors[0],
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
    powers_hold(&dir);
    a_users_token_registers_no_machine(&dir, &ports[0].1);
    a_client_with_only_the_secret_opens_tls(&dir);
}

/// What `carmi pool init` and `carmi join` installed, with their modes: the
/// key and the admin token on the manager only, each machine's token on it,
/// each user's token with them.
fn files_in_place(dir: &Path) {
    let manager = pool_dir(dir, "manager");
    for f in [
        "pool.secret",
        "pool.key",
        "pool.admin.token",
        "dashboard.key",
    ] {
        assert_eq!(mode(&manager.join(f)), 0o600, "the manager's {f}");
    }
    assert_eq!(mode(&manager.join("dashboard.crt")), 0o644);
    for (actor, token) in [
        ("lab-pc-07", "local.token"),
        ("compute-01", "local.token"),
        ("alice", "user.token"),
        ("bob", "user.token"),
    ] {
        let d = pool_dir(dir, actor);
        assert_eq!(mode(&d.join("pool.secret")), 0o600, "{actor}'s secret");
        assert_eq!(mode(&d.join(token)), 0o600, "{actor}'s token");
        for f in ["pool.key", "pool.admin.token"] {
            assert!(!d.join(f).exists(), "{actor} holds {f}");
        }
    }
}

/// The README's pool holds each token to its power (issue 37): bob cannot
/// remove alice's job, and a token that may only read cannot submit.
fn powers_hold(dir: &Path) {
    let as_user = |user: &str, cmd: &str| bash(dir, user, cmd).output().unwrap();
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
    let out = as_user("manager", "carmi pool add-user --authz read carol");
    assert!(out.status.success(), "{out:?}");
    let out = as_user("carol", "carmi join carol.join");
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

/// alice's token, presented by a local RM of her own, is refused: a user's
/// token registers no machine.
fn a_users_token_registers_no_machine(dir: &Path, port: &str) {
    let line = format!(
        "exec carmi-local --global 127.0.0.1:{port} --secret $CARMI_DIR/pool.secret \
         --token $CARMI_DIR/user.token --name alice-box --slot-users none"
    );
    let log = dir.join("intruder.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = bash(dir, "alice", &line)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let _intruder = Daemons(vec![child]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let refusal = "advertise machine `alice-box`";
    while !logs(dir).contains(refusal) {
        assert!(
            Instant::now() < deadline,
            "no refusal of alice-box\n{}",
            logs(dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = bash(dir, "manager", "carmi status").output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !listed.contains("alice-box"),
        "{listed}"
    );
}

/// A client that holds the pool secret and no token (someone given only
/// `pool.secret`) opens its connection with a TLS handshake (`16 03`), never
/// a frame in clear.
fn a_client_with_only_the_secret_opens_tls(dir: &Path) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let first = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut bytes = [0u8; 2];
        std::io::Read::read_exact(&mut conn, &mut bytes).unwrap();
        bytes
    });
    let secret = pool_dir(dir, "bob").join("pool.secret");
    let line = format!(
        "timeout 10 carmi status --pool {addr} --secret {}",
        secret.display()
    );
    let _ = bash(dir, "stranger", &line).output().unwrap();
    assert_eq!(first.join().unwrap(), [0x16, 0x03], "not a TLS handshake");
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
