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

use carmi_api::pooldir;
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
        .args([
            "verify",
            "carmi-global.service",
            "carmi-local.service",
            "carmi-relay.service",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify complained:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // The files of the pool's directory for root, /etc/carmi, where `sudo
    // carmi pool init` and `sudo carmi join` write them.
    let etc = |f: &str| format!("{}/{f}", pooldir::SYSTEM_DIR);
    let global = unit(&dest, "carmi-global.service");
    let start = key(&global, "ExecStart");
    assert_eq!(flag(start, "--pool-key"), Some(&*etc(pooldir::KEY)));
    assert_eq!(flag(start, "--secret"), Some(&*etc(pooldir::SECRET)));
    let local = unit(&dest, "carmi-local.service");
    let start = key(&local, "ExecStart");
    assert_eq!(flag(start, "--token"), Some(&*etc(pooldir::LOCAL_TOKEN)));
    assert_eq!(flag(start, "--secret"), Some(&*etc(pooldir::SECRET)));
    assert_eq!(flag(start, "--config"), Some(&*etc(pooldir::LOCAL_CONFIG)));
    assert_eq!(key(&local, "EnvironmentFile"), etc(pooldir::LOCAL_ENV));
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

/// `carmi ARGS` from the installed binaries in the directory `cwd`, as root
/// on a machine whose `/etc/carmi` is `dest`'s: no pool from the
/// environment, the pool's directory (`$CARMI_DIR`) the installed one.
fn carmi_as_root(dest: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(dest.join("usr/local/bin/carmi"))
        .args(args)
        .current_dir(cwd)
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_SECRET")
        .env_remove("CARMI_TOKEN")
        .env_remove("CARMI_LOCAL")
        .env_remove("CARMI_CONFIG")
        .env("CARMI_DIR", dest.join("etc/carmi"))
        .env("HOME", dest.join("root"))
        .env("XDG_STATE_HOME", dest.join("state-home"))
        .output()
        .expect("run carmi")
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
    let (secret, key_file) = (s(etc.join("pool.secret")), s(etc.join("pool.key")));

    // What deploy/systemd/README.md has the admin do, then the global unit.
    let init = carmi_as_root(&dest, &dest, &["pool", "init", "--pool", &pool]);
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

    // The machine's bundle, made on the manager with no flag (config.toml
    // names the pool, the secret and the admin token), installed by `carmi
    // join` over the skeleton install.sh left (here the manager's own
    // /etc/carmi: the same secret is no conflict).
    let m = "units-m1";
    let added = carmi_as_root(&dest, &dest, &["pool", "add-machine", m]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let bundle = format!("{m}.join");
    let joined = carmi_as_root(&dest, &dest, &["join", &bundle, "--no-start"]);
    assert!(joined.status.success(), "{}", text(&joined.stderr));
    assert_eq!(mode(&etc.join("local.token")), 0o600);
    let env = std::fs::read_to_string(etc.join("local.env")).unwrap();
    let global_addr = env
        .lines()
        .find_map(|l| l.strip_prefix("CARMI_GLOBAL="))
        .expect("local.env names the manager")
        .to_string();
    assert_eq!(global_addr, pool);
    let config = std::fs::read_to_string(etc.join("local.toml"))
        .unwrap()
        .replace("0.0.0.0:9620", &format!("127.0.0.1:{}", free_port()));
    assert!(config.starts_with(&format!("name = \"{m}\"")), "{config}");
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
    let env = [("CARMI_GLOBAL", global_addr)];
    daemons
        .0
        .push(command_of(&exec, &dest, &env, &log).spawn().unwrap());

    // The machine registers, seen with the admin token.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = carmi_as_root(&dest, &dest, &["status"]);
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

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
