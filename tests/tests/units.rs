//! The systemd units of `deploy/systemd/`, as `deploy/install.sh --systemd`
//! installs them (into a scratch root, `--destdir`): `systemd-analyze
//! verify` accepts them with no complaint, their command lines carry the
//! pool's signing key and the machine's daemon token, and those command
//! lines, run as written (only the scratch root put before `/usr/local`,
//! `/etc/carmi` and `/var/lib/carmi`, free ports, and slot users of the
//! test's own prefix), start a pool that holds every connection to a token.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::skip::{ready_unless, root_ready};
use carmi_tests::{bin_dir, scratch, text};

/// `deploy/install.sh --systemd` into `dest`, with this build's binaries.
fn install(dest: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/install.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--systemd", "--destdir"])
        .arg(dest)
        .arg("--bin-dir")
        .arg(bin_dir())
        .output()
        .expect("run deploy/install.sh");
    assert!(
        out.status.success(),
        "install.sh --systemd failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The unit `name` as installed under `dest`.
fn unit(dest: &Path, name: &str) -> String {
    std::fs::read_to_string(dest.join("etc/systemd/system").join(name)).expect("installed unit")
}

/// The value of the unit's one `KEY=` line.
fn key<'a>(unit: &'a str, key: &str) -> &'a str {
    let lines: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect();
    assert_eq!(lines.len(), 1, "one {key}= line in\n{unit}");
    lines[0]
}

/// The value of an option in a command line: the word after `flag`.
fn flag<'a>(command: &'a str, flag: &str) -> Option<&'a str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words.windows(2).find(|w| w[0] == flag).map(|w| w[1])
}

/// Where `systemd-analyze` is missing, why.
fn no_systemd_analyze() -> Option<String> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!found).then(|| "systemd-analyze not found (Debian: apt-get install systemd)".to_string())
}

#[test]
fn installed_units_pass_systemd_analyze_verify_and_start_with_key_and_token() {
    let name = "installed_units_pass_systemd_analyze_verify_and_start_with_key_and_token";
    if !ready_unless(name, no_systemd_analyze()) {
        return;
    }
    let dest = scratch("units-verify");
    install(&dest);
    // `--root` makes systemd-analyze read everything under `dest`, the
    // system's own units (sysinit.target, ...) included: a copy of them.
    let system = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|d| Path::new(d).join("sysinit.target").exists())
        .expect("the system's systemd units");
    std::fs::create_dir_all(dest.join("usr/lib/systemd")).unwrap();
    let cp = Command::new("cp")
        .arg("-r")
        .arg(system)
        .arg(dest.join("usr/lib/systemd/system"))
        .status()
        .unwrap();
    assert!(cp.success());
    let out = Command::new("systemd-analyze")
        .arg(format!("--root={}", dest.display()))
        .args(["verify", "carmi-global.service", "carmi-local.service"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify complained:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    let global = unit(&dest, "carmi-global.service");
    let start = key(&global, "ExecStart");
    assert_eq!(flag(start, "--pool-key"), Some("/etc/carmi/pool.key"));
    assert_eq!(flag(start, "--secret"), Some("/etc/carmi/pool.secret"));
    let local = unit(&dest, "carmi-local.service");
    let start = key(&local, "ExecStart");
    assert_eq!(flag(start, "--token"), Some("/etc/carmi/local.token"));
    assert_eq!(flag(start, "--secret"), Some("/etc/carmi/pool.secret"));
    assert_eq!(flag(start, "--config"), Some("/etc/carmi/local.toml"));
    assert_eq!(key(&local, "EnvironmentFile"), "/etc/carmi/local.env");
    for f in ["local.toml", "local.env"] {
        assert!(dest.join("etc/carmi").join(f).is_file(), "no skeleton {f}");
    }
    let _ = std::fs::remove_dir_all(&dest);
}

/// Daemons killed when the test ends, however it ends.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A unit's command line as a process writing to `log`: `/usr/local`,
/// `/etc/carmi` and `/var/lib/carmi` under `dest`, `${VAR}` from `env`.
fn command_of(exec: &str, dest: &Path, env: &[(&str, String)], log: &Path) -> Command {
    let mut line = exec.to_string();
    for dir in ["/usr/local/", "/etc/carmi/", "/var/lib/carmi/"] {
        line = line.replace(&format!(" {dir}"), &format!(" {}{dir}", dest.display()));
        if let Some(rest) = line.strip_prefix(dir) {
            line = format!("{}{dir}{rest}", dest.display());
        }
    }
    for (k, v) in env {
        line = line.replace(&format!("${{{k}}}"), v);
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(words[0]);
    cmd.args(&words[1..])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    cmd
}

/// `carmi ARGS` from the installed binaries, with no pool from the environment.
fn carmi(dest: &Path, args: &[&str]) -> Output {
    Command::new(dest.join("usr/local/bin/carmi"))
        .args(args)
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .env_remove("CARMI_TOKEN")
        .env_remove("CARMI_LOCAL")
        .env("CARMI_CONFIG", dest.join("no-config.toml"))
        .env("XDG_STATE_HOME", dest.join("state-home"))
        .output()
        .expect("run carmi")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Removes the test's slot users when it ends.
struct SlotUsers(PathBuf, String);

impl Drop for SlotUsers {
    fn drop(&mut self) {
        let _ = Command::new(&self.0)
            .args(["--remove-slot-users", "--slot-user-prefix", &self.1])
            .output();
    }
}

#[test]
fn the_units_command_lines_start_a_pool_that_needs_tokens() {
    // carmi-local.service runs as root, as its slot users need.
    if !root_ready("the_units_command_lines_start_a_pool_that_needs_tokens") {
        return;
    }
    let dest = scratch("units-start");
    install(&dest);
    let etc = dest.join("etc/carmi");
    let port = free_port();
    let pool = format!("127.0.0.1:{port}");
    let s = |p: PathBuf| p.display().to_string();
    let (secret, key_file, admin) = (
        s(etc.join("pool.secret")),
        s(etc.join("pool.key")),
        s(etc.join("pool.admin.token")),
    );

    // What deploy/systemd/README.md has the admin do, then the global unit.
    let init = carmi(&dest, &["pool", "init", "--secret", &secret]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    assert!(Path::new(&key_file).is_file(), "pool init wrote no key");
    std::fs::create_dir_all(dest.join("var/lib/carmi/global")).unwrap();
    let global = unit(&dest, "carmi-global.service");
    let exec = key(&global, "ExecStart").replace("0.0.0.0:9618", &pool);
    let mut daemons = Daemons(Vec::new());
    let log = dest.join("global.log");
    daemons
        .0
        .push(command_of(&exec, &dest, &[], &log).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&pool).is_err() {
        assert!(Instant::now() < deadline, "no global RM: {}", read(&log));
        std::thread::sleep(Duration::from_millis(50));
    }

    // The machine's daemon token, its configuration, then the local unit.
    let token = s(etc.join("local.token"));
    let m = "units-m1";
    let create = format!(
        "token create --pool {pool} --secret {secret} --token {admin} \
         --identity {m} --authz daemon --machine {m} --out {token}"
    );
    let created = carmi(&dest, &create.split_whitespace().collect::<Vec<_>>());
    assert!(created.status.success(), "{}", text(&created.stderr));
    let config = std::fs::read_to_string(etc.join("local.toml"))
        .unwrap()
        .replace("# name = \"lab-pc-07\"", &format!("name = \"{m}\""))
        .replace("0.0.0.0:9620", &format!("127.0.0.1:{}", free_port()));
    std::fs::write(etc.join("local.toml"), config).unwrap();
    let work = dest.join("var/lib/carmi/local");
    std::fs::create_dir_all(&work).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o711)).unwrap();
    let local = unit(&dest, "carmi-local.service");
    let prefix = format!("cu{}x", std::process::id());
    // This build's carmi-local removes them: the scratch root may be gone by then.
    let _accounts = SlotUsers(bin_dir().join("carmi-local"), prefix.clone());
    let exec = key(&local, "ExecStart").replace(
        "--slot-user-prefix carmi-slot",
        &format!("--slot-user-prefix {prefix}"),
    );
    let log = dest.join("local.log");
    let env = [("CARMI_GLOBAL", pool.clone())];
    daemons
        .0
        .push(command_of(&exec, &dest, &env, &log).spawn().unwrap());

    // The machine registers, seen with the admin token.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = carmi(
            &dest,
            &[
                "status", "--pool", &pool, "--secret", &secret, "--token", &admin,
            ],
        );
        if text(&out.stdout).contains(m) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{m} did not register:\n{}\n{}",
            read(&dest.join("global.log")),
            read(&log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The pool secret alone, without a token, is refused.
    let out = carmi(&dest, &["status", "--pool", &pool, "--secret", &secret]);
    assert!(!out.status.success(), "a client with no token was served");
    drop(daemons);
    let _ = std::fs::remove_dir_all(&dest);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
