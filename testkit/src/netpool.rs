//! A pool whose daemons each run on a host of their own ([`netns::Net`]):
//! `carmi-global` on host 0, one `carmi-local` on each other host, and the
//! job's processes (started by their local RM) in their host's namespace.
//! The test process stays in the root namespace and reaches every host
//! through the bridge, so a master or WoDi server it starts is a host of
//! its own too (at [`netns::Net::gateway`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use carmi_api::handshake::Secret;
use carmi_api::token::{Power, SigningKey};

use crate::PoolOptions;
use crate::netns::Net;

/// The host the global RM runs on.
pub const GLOBAL_HOST: usize = 0;

/// One `carmi-local` of a [`NetPool`].
pub struct NetLocal {
    /// Its machine name (`m1`, `m2`... after its host).
    pub name: String,
    /// Its host in [`NetPool::net`].
    pub host: usize,
    /// Where applications connect to it (its host's address).
    pub app_addr: String,
    child: Option<Child>,
}

impl NetLocal {
    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A running pool over network namespaces; dropping it stops the daemons
/// and removes the hosts and the directory (the logs' last lines go to
/// stderr first if the test is panicking; `CARMI_KEEP_NETNS_DIR=1` keeps
/// the directory).
pub struct NetPool {
    /// The local RMs (and their processes) first: dropped before the net.
    pub locals: Vec<NetLocal>,
    global: Child,
    /// The hosts.
    pub net: Net,
    /// Secret, keys, state and work directories, logs.
    pub dir: PathBuf,
    /// The secret file.
    pub secret_path: PathBuf,
    /// The secret, presenting the admin token.
    pub secret: Secret,
    /// The pool's signing key.
    pub key: SigningKey,
    /// The admin token's file.
    pub admin_token: PathBuf,
    /// `ip:port` of the global RM on host 0.
    pub global_addr: String,
}

impl NetPool {
    /// Makes `locals + 1` hosts and starts the global RM on host 0 and a
    /// local RM with `slots` slots on each other host (`options` as for
    /// [`crate::Pool::start_with`]).
    pub fn start(name: &str, slots: u32, locals: usize, options: &PoolOptions) -> NetPool {
        let bins = crate::bin_dir();
        let net = Net::create(locals + 1);
        let dir = crate::scratch(name);
        let (secret_path, secret, key, admin_token) = crate::pool_keys(&dir);
        let log = |n: &str| std::fs::File::create(dir.join(format!("{n}.log"))).expect("a log");
        let global_ip = net.hosts[GLOBAL_HOST].ip;
        let mut global = net.command(GLOBAL_HOST, bins.join("carmi-global"));
        let listen = format!("{global_ip}:0");
        let mut global = crate::global_args(&mut global, &listen, &dir, options)
            .stderr(log("global"))
            .spawn()
            .expect("start carmi-global in its namespace");
        let global_addr = crate::daemon_lines(&mut global, "carmi-global", 1).remove(0);
        let config = dir.join("local.toml");
        let text = options.local_config_text();
        std::fs::write(&config, text).expect("write the local RM configuration");
        let mut pool = NetPool {
            locals: Vec::new(),
            global,
            net,
            dir,
            secret_path,
            secret,
            key,
            admin_token,
            global_addr,
        };
        for host in 1..=locals {
            let local = pool.start_local(host, slots, &config);
            pool.locals.push(local);
        }
        pool
    }

    fn start_local(&self, host: usize, slots: u32, config: &Path) -> NetLocal {
        let name = format!("m{host}");
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("a log");
        let token = self.dir.join(format!("{name}.token"));
        let grant = crate::grant(&name, Power::Daemon, Some(&name));
        let (text, _) = self.key.issue(&grant, crate::now_unix()).expect("a token");
        carmi_api::files::write_private(&token, &text, false).expect("write the token file");
        let pool = (self.global_addr.as_str(), self.secret_path.as_path());
        let mut child = local_command(&self.net, host, &self.dir, pool)
            .args(["--slots", &slots.to_string()])
            .arg("--config")
            .arg(config)
            .stderr(log)
            .spawn()
            .expect("start carmi-local in its namespace");
        let app_addr = crate::listening_addr(&mut child, &name);
        NetLocal {
            name,
            host,
            app_addr,
            child: Some(child),
        }
    }

    /// The global RM's process id.
    pub fn global_pid(&self) -> u32 {
        self.global.id()
    }

    /// Cuts host `i` off ([`Net::cut`]); host 0 is the global RM's.
    pub fn cut(&self, i: usize) {
        self.net.cut(i);
    }

    /// Connects host `i` again.
    pub fn restore(&self, i: usize) {
        self.net.restore(i);
    }

    /// `carmi` run from the test's namespace, aimed at this pool as the admin.
    pub fn carmi(&self) -> Command {
        let mut cmd = Command::new(crate::bin_dir().join("carmi"));
        cmd.env("CARMI_POOL", &self.global_addr)
            .env("CARMI_SECRET", &self.secret_path)
            .env("CARMI_TOKEN", &self.admin_token)
            .env("CARMI_CONFIG", "/nonexistent/carmi-config.toml")
            .env("XDG_STATE_HOME", "/nonexistent/carmi-state")
            .env_remove("CARMI_MACHINE")
            .env_remove("CARMI_LOCAL");
        cmd
    }

    /// Whether every local RM is registered with its slots now.
    pub fn registered(&self) -> bool {
        let names: Vec<&str> = self.locals.iter().map(|l| l.name.as_str()).collect();
        crate::all_registered(self.carmi(), &names)
    }

    /// Blocks until every local RM is registered, at most `limit`.
    pub fn wait_registered(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while !self.registered() {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool's machines were not all registered within {limit:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines of every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        let names =
            std::iter::once("global".to_string()).chain(self.locals.iter().map(|l| l.name.clone()));
        for n in names {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{n}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("--- {n}.log (last lines)\n"));
            for l in &lines[lines.len().saturating_sub(25)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

/// Open file descriptors of process `pid` (sockets among them).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Drop for NetPool {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("NetPool {}:\n{}", self.dir.display(), self.logs());
        }
        // Links up again, so that the daemons' last words go out quickly.
        for i in 0..self.net.hosts.len() {
            let _ = std::panic::catch_unwind(|| self.net.restore(i));
        }
        for l in &mut self.locals {
            if let Some(mut c) = l.child.take() {
                crate::stop(&mut c);
            }
        }
        crate::stop(&mut self.global);
        for e in self.net.teardown() {
            eprintln!("NetPool teardown: {e}");
        }
        if std::env::var("CARMI_KEEP_NETNS_DIR").is_ok_and(|v| v == "1") {
            eprintln!("NetPool: kept {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `carmi-local` on `host` of `net` as `m{host}`: its token
/// `dir/m{host}.token`, its work directory `dir/m{host}`, listening on the
/// host's address, reaching the pool at `global` with the pool secret in
/// `secret`. The caller adds slots, configuration and log.
pub(crate) fn local_command(
    net: &Net,
    host: usize,
    dir: &Path,
    (global, secret): (&str, &Path),
) -> Command {
    let name = format!("m{host}");
    let ip = net.hosts[host].ip;
    let mut cmd = net.command(host, crate::bin_dir().join("carmi-local"));
    cmd.args(["--name", &name])
        .arg("--token")
        .arg(dir.join(format!("{name}.token")))
        .args(["--listen", &format!("{ip}:0")])
        .arg("--work-dir")
        .arg(dir.join(&name))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .args(["--global", global, "--secret"])
        .arg(secret);
    cmd
}
