//! What CARMI's tests share, so that each test file writes only its test.
//!
//! - [`Pool`]: a pool on localhost for end-to-end tests: one `carmi-global`
//!   and several `carmi-local` processes, started from the workspace's own
//!   binaries and stopped when the [`Pool`] is dropped.
//! - [`Inbox`]: an application's event stream that keeps what arrives while
//!   a test waits for something else (RM events come in any order).
//! - [`FakeGlobal`]: an in-process global RM speaking the real handshake and frames.
//! - [`Fleet`]: thousands of machines speaking the real protocol to a real
//!   global RM from tasks of one process (scale tests and `carmi-bench scale`).
//! - [`scratch`] and [`TempDir`]: scratch directories.
//! - [`write_script`], [`Pool::submit_script`], [`Pool::wait_for`]: jobs
//!   whose master is a shell script, submitted and waited for.
//! - [`Browser`]: a headless Chromium driven over the DevTools protocol.
//! - [`NetPool`]: a pool whose daemons run on hosts of their own, network
//!   namespaces on a bridge ([`netns::Net`]), whose links a test can cut.
//!
//! # Layout
//! - `lib.rs`: the process pool, scratch directories, test executables.
//! - `inbox`: [`Inbox`] and [`InboxError`], [`take_event`].
//! - `jobs`: script jobs ([`write_job`], [`submit_request`]), submitting them
//!   and waiting on them (the `Pool` methods `carmi_in`, `run_ok`, `wait_*`).
//! - `cgroups`: sweeping what local RMs a test SIGKILLed left in their cgroups.
//! - `fake_global`: [`FakeGlobal`], [`GlobalConn`]; `browser`: [`Browser`]; `extra_local`: [`ExtraLocal`].
//! - `netns`: [`netns::Net`], the namespaces and their clean-up; `netpool`: [`NetPool`].
//! - `fleet`: [`Fleet`], [`FleetApp`].
//! - `wiretap`: [`Proxy`] (watches and flips bytes), [`listening_ports`].

mod browser;
mod build;
pub use build::cargo_build;
pub mod cgroups;
mod extra_local;
mod relay;
pub use relay::Relay;
mod fake_global;
mod fleet;
mod inbox;
mod jobs;
mod managers;
pub mod netns;
mod netpool;
pub mod raw;
mod recorder;
pub mod skip;
mod wiretap;

pub use browser::{Browser, https};
pub use extra_local::ExtraLocal;
pub use fake_global::{FAKE_SECRET, FAKE_WAIT, FakeGlobal, GlobalConn};
pub use fleet::{Fleet, FleetApp, FleetError, FleetOptions};
pub use inbox::{Inbox, InboxError, take_event};
pub use jobs::{gated_starts, state_of, submit_request, write_job, write_script};
pub use managers::Managers;
pub use netpool::{GLOBAL_HOST, NetLocal, NetPool, open_fds, rss_kib};
pub use recorder::Recorder;
pub use skip::root_ready;
pub use wiretap::{Proxy, listening_ports, pid_listening_on};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use carmi_api::handshake::Secret;
use carmi_api::token::{Grant, Power, SigningKey};

/// Heartbeat period the test pools run with. With [`MISSED_HEARTBEATS`] a
/// machine is lost after 3 s of silence: patient enough for a 2-core CI
/// machine at load ~18 (200 ms x 3 lost machines about a second after
/// start there), quick enough for tests that lose one on purpose. A test
/// about loss itself asks for a shorter one ([`PoolOptions`]).
pub const HEARTBEAT_MS: u64 = 500;
/// Missed heartbeats before a machine is declared lost.
pub const MISSED_HEARTBEATS: u32 = 6;

/// A command's output as text, for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where cargo put the workspace binaries, building them first if needed.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("path of the test binary");
        // Tests live in target/<profile>/deps/, binaries (the benchmarks of
        // carmi-benches) in target/<profile>/ itself, beside the daemons.
        let mut dir = exe
            .parent()
            .expect("the test binary lives in a directory")
            .to_path_buf();
        if dir.file_name().is_some_and(|n| n == "deps") {
            dir.pop();
        }
        let mut cmd = cargo_build(&[
            "-p",
            "carmi-global",
            "-p",
            "carmi-local",
            "-p",
            "carmi-cli",
            "-p",
            "carmi-relay",
            "--bins",
        ]);
        let status = cmd.status().expect("run cargo build for the daemons");
        assert!(
            status.success(),
            "building carmi-global, carmi-local and carmi failed"
        );
        dir
    })
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "carmi-e2e-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A scratch directory ([`scratch`]) removed with everything in it when
/// dropped, for tests that leave nothing worth reading behind.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory whose name contains `name`.
    pub fn new(name: &str) -> TempDir {
        TempDir(scratch(name))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads the `listening on ADDR` line a daemon prints first.
fn listening_addr(child: &mut Child, what: &str) -> String {
    daemon_lines(child, what, 1).remove(0)
}

/// Reads the first `n` lines a daemon prints (`listening on ADDR`, then
/// the global RM's `dashboard on URL` when it serves one) and returns what
/// follows `listening on ` and `dashboard on `.
fn daemon_lines(child: &mut Child, what: &str, n: usize) -> Vec<String> {
    let out = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = BufReader::new(out);
        for _ in 0..n {
            let mut line = String::new();
            let _ = out.read_line(&mut line);
            let _ = tx.send(line);
        }
    });
    (0..n)
        .map(|_| {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{what} did not report its address"));
            let line = line.trim();
            line.strip_prefix("listening on ")
                .or_else(|| line.strip_prefix("dashboard on "))
                .unwrap_or_else(|| panic!("{what} printed {line:?} instead of its address"))
                .to_string()
        })
        .collect()
}

/// One `carmi-local` of a test pool.
pub struct Local {
    /// Its machine name.
    pub name: String,
    /// Where applications connect to it.
    pub app_addr: String,
    attrs: Vec<String>,
    child: Option<Child>,
}

/// Settings of a test pool.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Heartbeat period, in milliseconds.
    pub heartbeat_ms: u64,
    /// Missed heartbeats before a machine is declared lost.
    pub missed_heartbeats: u32,
    /// TOML appended to every local RM's configuration file (which starts as
    /// [`LOCAL_CONFIG`]; it may add a `[policy]` table, not another `[owner]`).
    pub local_config: String,
    /// Top-level TOML keys put before [`LOCAL_CONFIG`]'s tables (`stage_link_rate = 1.0`).
    /// Unless they name `slot_users` or `slot_user_prefix`, the local RMs run
    /// jobs as the test's own user (`slot_users = []`), also as root: tests
    /// hand jobs paths in their scratch directories, which slot users may not
    /// reach; `tests/tests/isolation.rs` runs them as slot users.
    pub local_settings: String,
    /// Extra command-line arguments of the global RM (`--stage-fanout 1`).
    pub global_args: Vec<String>,
    /// Extra command-line arguments of every local RM of a [`Pool`]
    /// (`--owner real`, which overrides [`LOCAL_CONFIG`]'s simulated owner).
    pub local_args: Vec<String>,
    /// Lifetime of the daemon token made for each local RM of a [`Pool`],
    /// in seconds (a day; a few seconds to watch the global RM renew it).
    pub daemon_token_s: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            heartbeat_ms: HEARTBEAT_MS,
            missed_heartbeats: MISSED_HEARTBEATS,
            local_config: String::new(),
            global_args: Vec::new(),
            local_settings: String::new(),
            local_args: Vec::new(),
            daemon_token_s: 24 * 3600,
        }
    }
}

/// A running pool.
pub struct Pool {
    /// Scratch directory holding secret, state and work dirs, and logs.
    pub dir: PathBuf,
    /// The secret file.
    pub secret_path: PathBuf,
    /// The secret, presenting the pool's admin token ([`Pool::admin_token`]).
    pub secret: Secret,
    /// The pool's signing key (the global RM reads it from `pool.key`).
    pub key: SigningKey,
    /// The file of the admin token (identity `admin`) that [`Pool::carmi`]
    /// and [`Pool::secret`] present.
    pub admin_token: PathBuf,
    /// `host:port` of the global RM.
    pub global_addr: String,
    /// The global RM's dashboard (`https://host:port/`), when
    /// [`PoolOptions::global_args`] has `--http`.
    pub dashboard: Option<String>,
    global: Child,
    /// The local RMs, in start order.
    pub locals: Vec<Local>,
    slots: u32,
    options: PoolOptions,
}

fn stop(child: &mut Child) {
    // SIGTERM lets a local RM kill its own processes; SIGKILL if it hangs.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    // A local RM stopped by `Pool::pause_local` acts on SIGTERM only once continued.
    let _ = Command::new("kill")
        .args(["-CONT", &child.id().to_string()])
        .status();
    for _ in 0..50 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn grant(identity: &str, power: Power, machine: Option<&str>) -> Grant {
    Grant {
        identity: identity.into(),
        power,
        machine: machine.map(Into::into),
        lifetime_s: 24 * 3600,
    }
}

fn now_unix() -> u64 {
    carmi_api::token::now_unix()
}

/// Writes a new pool's secret (`pool.secret`), signing key (`pool.key`)
/// and admin token (`admin.token`) into `dir`; returns the secret's path,
/// the secret presenting the admin token, the key and the token's path.
fn pool_keys(dir: &Path) -> (PathBuf, Secret, SigningKey, PathBuf) {
    let secret_path = dir.join("pool.secret");
    let private = |path: &Path, text: &str| {
        carmi_api::files::write_private(path, text, false).expect("write a key file")
    };
    private(&secret_path, &Secret::generate_text());
    let key = SigningKey::generate().expect("a signing key");
    private(&dir.join("pool.key"), &key.to_text());
    let admin_token = dir.join("admin.token");
    let (admin, _) = key
        .issue(&grant("admin", Power::Admin, None), now_unix())
        .expect("an admin token");
    private(&admin_token, &admin);
    let secret = Secret::from_file(&secret_path)
        .expect("secret reads back")
        .with_token(Some(admin));
    (secret_path, secret, key, admin_token)
}

/// `cmd` (a `carmi-global`) set up as a test pool's global RM: listening
/// on `listen`, with the secret, key and state of the pool in `dir`, the
/// heartbeat and arguments of `options`, logging at `info`, its address
/// printed to a pipe.
fn global_args<'a>(
    cmd: &'a mut Command,
    listen: &str,
    dir: &Path,
    options: &PoolOptions,
) -> &'a mut Command {
    cmd.args(["--listen", listen, "--secret"])
        .arg(dir.join("pool.secret"))
        .arg("--pool-key")
        .arg(dir.join("pool.key"))
        .arg("--state-dir")
        .arg(dir.join("global-state"))
        .args(["--heartbeat-ms", &options.heartbeat_ms.to_string()])
        .args([
            "--missed-heartbeats",
            &options.missed_heartbeats.to_string(),
        ])
        .args(&options.global_args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
}

/// Whether `carmi status --json` (run by `carmi`) lists every machine of
/// `names` with its slots.
fn all_registered(mut carmi: Command, names: &[&str]) -> bool {
    let out = carmi.args(["status", "--json"]).output();
    out.ok().filter(|o| o.status.success()).is_some_and(|o| {
        let machines: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        names.iter().all(|name| {
            machines.as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    m["name"] == *name && m["slots"].as_array().is_some_and(|s| !s.is_empty())
                })
            })
        })
    })
}

/// The local RMs' configuration: a simulated owner (away from the start), so
/// that terminals in use on the test machine do not close the pool.
pub const LOCAL_CONFIG: &str = "[owner]\nsource = \"simulated\"\n";

impl PoolOptions {
    /// The local RMs' configuration file: the test's settings, then
    /// [`LOCAL_CONFIG`] and the test's tables. Unless the test names slot
    /// users, jobs run as the test's own user (`slot_users = []`): a local
    /// RM started as root would otherwise make accounts that cannot write
    /// the test's files.
    pub fn local_config_text(&self) -> String {
        let own_user = if self.local_settings.contains("slot_user") {
            ""
        } else {
            "slot_users = []\n"
        };
        format!(
            "{own_user}{}{LOCAL_CONFIG}{}",
            self.local_settings, self.local_config
        )
    }
}

impl Pool {
    /// Starts a global RM and one local RM per entry of `machines`: each entry
    /// is the list of `--attr NAME=VALUE` settings of that machine.
    pub fn start(name: &str, slots: u32, machines: &[Vec<String>]) -> Pool {
        Pool::start_with(name, slots, machines, PoolOptions::default())
    }

    /// [`Pool::start`] with other settings (a benchmark with many local RMs
    /// on one host wants a more patient heartbeat).
    pub fn start_with(
        name: &str,
        slots: u32,
        machines: &[Vec<String>],
        options: PoolOptions,
    ) -> Pool {
        let bins = bin_dir();
        let dir = scratch(name);
        let (secret_path, secret, key, admin_token) = pool_keys(&dir);
        let log = |dir: &Path, n: &str| {
            std::fs::File::create(dir.join(format!("{n}.log"))).expect("create log file")
        };
        let mut global = Command::new(bins.join("carmi-global"));
        let mut global = global_args(&mut global, "127.0.0.1:0", &dir, &options)
            .stderr(log(&dir, "global"))
            .spawn()
            .expect("start carmi-global");
        let serves_http = options.global_args.iter().any(|a| a == "--http");
        let mut lines = daemon_lines(&mut global, "carmi-global", 1 + usize::from(serves_http));
        let global_addr = lines.remove(0);
        let dashboard = lines.pop();
        let local_config = dir.join("local.toml");
        std::fs::write(&local_config, options.local_config_text())
            .expect("write the local RM configuration");
        let mut pool = Pool {
            dir,
            secret_path,
            secret,
            key,
            admin_token,
            global_addr,
            dashboard,
            global,
            locals: Vec::new(),
            slots,
            options,
        };
        for (i, attrs) in machines.iter().enumerate() {
            let local = pool.start_local(format!("m{i}"), attrs.clone(), false);
            pool.locals.push(local);
        }
        pool
    }

    /// The global RM's process id.
    pub fn global_pid(&self) -> u32 {
        self.global.id()
    }

    /// Kills the global RM with SIGKILL and starts it again on the same
    /// address and state directory, as after a crash.
    pub fn restart_global(&mut self) {
        let _ = self.global.kill();
        let _ = self.global.wait();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("global.log"))
            .expect("open global log");
        let mut global = Command::new(bin_dir().join("carmi-global"));
        let mut global = global_args(&mut global, &self.global_addr, &self.dir, &self.options)
            .stderr(log)
            .spawn()
            .expect("restart carmi-global");
        let serves_http = self.options.global_args.iter().any(|a| a == "--http");
        let what = "carmi-global (restarted)";
        let mut lines = daemon_lines(&mut global, what, 1 + usize::from(serves_http));
        let addr = lines.remove(0);
        self.dashboard = lines.pop();
        assert_eq!(addr, self.global_addr, "restarted on the same address");
        self.global = global;
    }

    /// Kills the global RM with SIGKILL and does not start it again: the
    /// pool's machines find it gone (connections refused) until
    /// [`Pool::restart_global`], if ever.
    pub fn kill_global(&mut self) {
        let _ = self.global.kill();
        let _ = self.global.wait();
    }

    /// Stops the global RM with SIGSTOP: it reads nothing more, so that
    /// what is sent to it meanwhile is lost by a [`Pool::restart_global`].
    pub fn stop_global(&self) {
        let status = Command::new("kill")
            .args(["-STOP", &self.global.id().to_string()])
            .status()
            .expect("run kill -STOP");
        assert!(status.success(), "kill -STOP of the global RM failed");
    }

    /// Starts local RM `name` with `--attr` settings `attrs`; its log is
    /// appended to if `append`, else created.
    fn start_local(&self, name: String, attrs: Vec<String>, append: bool) -> Local {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(&log_path)
            .expect("open the local RM's log");
        let token = self.dir.join(format!("{name}.token"));
        if !token.exists() {
            let lifetime_s = self.options.daemon_token_s;
            self.token_file(&token, &name, Power::Daemon, Some(&name), lifetime_s);
        }
        let mut cmd = Command::new(bin_dir().join("carmi-local"));
        cmd.args(["--global", &self.global_addr, "--secret"])
            .arg(&self.secret_path)
            .arg("--token")
            .arg(&token)
            .args(["--name", &name, "--slots", &self.slots.to_string()])
            .arg("--config")
            .arg(self.dir.join("local.toml"))
            .arg("--work-dir")
            .arg(self.dir.join(&name))
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log);
        for a in &attrs {
            cmd.args(["--attr", a]);
        }
        cmd.args(&self.options.local_args);
        let mut child = cmd.spawn().expect("start carmi-local");
        let app_addr = listening_addr(&mut child, &name);
        Local {
            name,
            app_addr,
            attrs,
            child: Some(child),
        }
    }

    /// Starts local RM `i` again (after [`Pool::kill_local`]) with the same
    /// name, attributes and work directory, as a machine coming back; its
    /// application address may change.
    pub fn restart_local(&mut self, i: usize) {
        self.kill_local(i);
        let old = &self.locals[i];
        let local = self.start_local(old.name.clone(), old.attrs.clone(), true);
        self.locals[i] = local;
    }

    /// Kills local RM `i` with SIGKILL, as a machine that vanishes.
    pub fn kill_local(&mut self, i: usize) {
        if let Some(mut c) = self.locals[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops local RM `i` with SIGSTOP (its processes keep running): it
    /// sends no heartbeat until [`Pool::resume_local`], as a machine whose
    /// network or daemon stalls for a moment.
    pub fn pause_local(&self, i: usize) {
        self.signal_local(i, "-STOP");
    }

    /// Continues local RM `i` after [`Pool::pause_local`].
    pub fn resume_local(&self, i: usize) {
        self.signal_local(i, "-CONT");
    }

    fn signal_local(&self, i: usize, signal: &str) {
        let child = self.locals[i].child.as_ref().expect("local RM is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} of local RM {i} failed");
    }

    /// `carmi` aimed at this pool as a user outside it runs it: the pool
    /// and its secret from the environment, no config file, no embedded
    /// pool's record, no machine named (tests add `CARMI_MACHINE` to pin).
    pub fn carmi(&self) -> Command {
        let mut cmd = Command::new(bin_dir().join("carmi"));
        cmd.env("CARMI_POOL", &self.global_addr)
            .env("CARMI_SECRET", &self.secret_path)
            .env("CARMI_TOKEN", &self.admin_token)
            .env("CARMI_CONFIG", "/nonexistent/carmi-config.toml")
            .env("XDG_STATE_HOME", "/nonexistent/carmi-state")
            .env_remove("CARMI_MACHINE")
            .env_remove("CARMI_LOCAL");
        cmd
    }

    /// Signs a token for `identity` with `power` (and `machine`) lasting
    /// `lifetime_s` and writes it to the new file `path` (mode 0600);
    /// returns its text.
    pub fn token_file(
        &self,
        path: &Path,
        identity: &str,
        power: Power,
        machine: Option<&str>,
        lifetime_s: u64,
    ) -> String {
        let mut g = grant(identity, power, machine);
        g.lifetime_s = lifetime_s;
        let (token, _) = self.key.issue(&g, now_unix()).expect("a token");
        carmi_api::files::write_private(path, &token, false).expect("write the token file");
        token
    }

    /// Blocks until every local RM of the pool is registered with its
    /// slots (as `carmi status --json` shows them), at most 30 s.
    pub fn wait_registered(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let names: Vec<&str> = self.locals.iter().map(|l| l.name.as_str()).collect();
            if all_registered(self.carmi(), &names) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pool did not come up\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The logs of every daemon, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for n in
            std::iter::once("global".to_string()).chain(self.locals.iter().map(|l| l.name.clone()))
        {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{n}.log"))).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {n}.log (last lines)\n"));
            for l in tail.iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for l in &mut self.locals {
            if let Some(mut c) = l.child.take() {
                stop(&mut c);
            }
        }
        stop(&mut self.global);
        self.sweep_cgroups();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes a `size`-byte shell script that exits at once: after `exit 0`
/// come comment lines the shell never reaches. `seed` makes the content, and
/// so the hash, new for every run that must find no cache warm. The filler
/// is varied (xorshift64), so hashing and copying handle real content, not
/// a run of one byte.
pub fn write_executable(path: &Path, size: usize, seed: u64) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(b"#!/bin/sh\nexit 0\n");
    let mut x = seed | 1;
    while out.len() < size {
        out.push(b'#');
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(format!("{x:016x}").as_bytes());
        }
        out.push(b'\n');
    }
    out.truncate(size - 1);
    out.push(b'\n');
    std::fs::write(path, &out)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}
