//! A pool with several managers (issue 35, docs/standby.md): `carmi-global`
//! started two or three times on this host, each with a state directory of
//! its own, one lease file, and the others' replication addresses; the
//! first is active, the others stand by. The pool's address is the list of
//! all of them, as the local RMs and `carmi` are given it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use carmi_api::token::Power;

use crate::netns::Net;
use crate::{Local, Pool, PoolOptions, bin_dir, pool_keys, scratch};

/// The managers of a test pool: `pool.global_addr` lists them all, and
/// manager 0 is `pool`'s global RM ([`Pool::kill_global`] kills it).
pub struct Managers {
    /// The pool (its local RMs given the list of managers).
    pub pool: Pool,
    /// Where each manager serves the pool.
    pub addrs: Vec<String>,
    /// Each manager's replication address (`--ha-listen`).
    pub repl: Vec<String>,
    /// The lease file they share.
    pub lock: PathBuf,
    /// Managers 1.. (0 is the pool's global RM).
    others: Vec<Option<Child>>,
    /// Each manager's stdout lines (`listening on ...` once active).
    lines: Vec<Receiver<String>>,
    /// The hosts, managers first, when each daemon has one: dropped last.
    pub net: Option<Net>,
}

/// A free TCP port on 127.0.0.1 (free when asked: taken again at once by
/// the caller's daemon).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Every line `child` prints, in a channel.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Managers {
    /// Starts `n` managers (the first active, the others standing by) and a
    /// local RM per entry of `machines`, as [`Pool::start_with`] does.
    pub fn start(
        name: &str,
        n: usize,
        slots: u32,
        machines: &[Vec<String>],
        options: PoolOptions,
    ) -> Managers {
        let addrs: Vec<String> = (0..n)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let repl: Vec<String> = (0..n)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        Managers::start_on(name, (addrs, repl, None), slots, machines, options)
    }

    /// [`Managers::start`] with every daemon on a host of its own: manager
    /// `i` on host `i`, local RM `j` on host `n + j` (named `m{n + j}`).
    pub fn start_net(
        name: &str,
        n: usize,
        slots: u32,
        locals: usize,
        options: PoolOptions,
    ) -> Managers {
        let net = Net::create(n + locals);
        let addrs = (0..n)
            .map(|i| format!("{}:9618", net.hosts[i].ip))
            .collect();
        let repl = (0..n)
            .map(|i| format!("{}:9700", net.hosts[i].ip))
            .collect();
        let machines = vec![Vec::new(); locals];
        Managers::start_on(name, (addrs, repl, Some(net)), slots, &machines, options)
    }

    fn start_on(
        name: &str,
        (addrs, repl, net): (Vec<String>, Vec<String>, Option<Net>),
        slots: u32,
        machines: &[Vec<String>],
        options: PoolOptions,
    ) -> Managers {
        let n = addrs.len();
        let dir = scratch(name);
        let (secret_path, secret, key, admin_token) = pool_keys(&dir);
        let lock = dir.join("managers.lease");
        let mut children = Vec::new();
        let mut lines = Vec::new();
        for i in 0..n {
            let mut child = manager_command(&dir, i, (&addrs, &repl, net.as_ref()), &options)
                .spawn()
                .expect("start carmi-global");
            lines.push(lines_of(&mut child));
            children.push(child);
            if i == 0 {
                let first = lines[0]
                    .recv_timeout(Duration::from_secs(60))
                    .expect("the first manager becomes active");
                assert!(first.starts_with("listening on "), "{first}");
            }
        }
        let mut children = children.into_iter();
        let global = children.next().expect("one manager at least");
        let local_config = dir.join("local.toml");
        std::fs::write(&local_config, options.local_config_text())
            .expect("write the local RM configuration");
        let mut pool = Pool {
            dir,
            secret_path,
            secret,
            key,
            admin_token,
            global_addr: addrs.join(","),
            dashboard: None,
            global,
            locals: Vec::new(),
            slots,
            options,
        };
        for (i, attrs) in machines.iter().enumerate() {
            let local = match &net {
                None => pool.start_local(format!("m{i}"), attrs.clone(), false),
                Some(net) => net_local(&pool, net, n + i),
            };
            pool.locals.push(local);
        }
        Managers {
            pool,
            addrs,
            repl,
            lock,
            others: children.map(Some).collect(),
            lines,
            net,
        }
    }

    /// Manager `i`'s state directory.
    pub fn state_dir(&self, i: usize) -> PathBuf {
        self.pool.dir.join(format!("manager{i}"))
    }

    /// Kills manager `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if i == 0 {
            self.pool.kill_global();
        } else if let Some(mut c) = self.others[i - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts manager `i` again (after [`Managers::kill`]): it stands by.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let where_ = (&self.addrs[..], &self.repl[..], self.net.as_ref());
        let mut child = manager_command(&self.pool.dir, i, where_, &self.pool.options)
            .spawn()
            .expect("restart carmi-global");
        self.lines[i] = lines_of(&mut child);
        if i == 0 {
            self.pool.global = child;
        } else {
            self.others[i - 1] = Some(child);
        }
    }

    /// Whether manager `i` said it is active (`listening on`) within `limit`.
    pub fn becomes_active(&self, i: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines[i].recv_timeout(left) {
                Ok(line) if line.starts_with("listening on ") => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// `carmi pool status --json`, parsed: one row per manager.
    pub fn status(&self) -> Vec<serde_json::Value> {
        let out = self
            .pool
            .carmi()
            .args(["pool", "status", "--json"])
            .output()
            .expect("run carmi pool status");
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    /// Waits (at most 60 s) until `carmi pool status` shows every standby
    /// in sync with the active manager.
    pub fn wait_in_sync(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rows = self.status();
            let synced = rows
                .iter()
                .filter(|r| {
                    r["role"] == "standby"
                        && r["detail"].as_str().is_some_and(|d| d.contains("(in sync"))
                })
                .count();
            let active = rows.iter().filter(|r| r["role"] == "active").count();
            if active == 1 && synced + 1 == self.addrs.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standbys did not come in sync: {rows:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every daemon's log tail, the standbys' included.
    pub fn logs(&self) -> String {
        let mut s = self.pool.logs();
        for i in 1..self.addrs.len() {
            let text = std::fs::read_to_string(self.pool.dir.join(format!("global{i}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- global{i}.log (last lines)\n"));
            for l in tail.iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

/// Manager `i`'s command: its address, state directory and log, the
/// shared lease, the others' replication addresses.
fn manager_command(
    dir: &Path,
    i: usize,
    (addrs, repl, net): (&[String], &[String], Option<&Net>),
    options: &PoolOptions,
) -> Command {
    let log_name = if i == 0 {
        "global.log".to_string()
    } else {
        format!("global{i}.log")
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(log_name))
        .expect("open the manager's log");
    let peers: Vec<&str> = repl
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, r)| r.as_str())
        .collect();
    let program = bin_dir().join("carmi-global");
    let mut cmd = match net {
        Some(net) => net.command(i, program),
        None => Command::new(program),
    };
    cmd.args(["--listen", &addrs[i], "--secret"])
        .arg(dir.join("pool.secret"))
        .arg("--pool-key")
        .arg(dir.join("pool.key"))
        .arg("--state-dir")
        .arg(dir.join(format!("manager{i}")))
        .args(["--heartbeat-ms", &options.heartbeat_ms.to_string()])
        .args([
            "--missed-heartbeats",
            &options.missed_heartbeats.to_string(),
        ])
        .arg("--ha-lock")
        .arg(dir.join("managers.lease"))
        .args(["--ha-listen", &repl[i]])
        .args(["--ha-peers", &peers.join(",")])
        .args(&options.global_args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log);
    cmd
}

/// A local RM on `host` of `net`, given the pool's list of managers.
fn net_local(pool: &Pool, net: &Net, host: usize) -> Local {
    let name = format!("m{host}");
    let log = std::fs::File::create(pool.dir.join(format!("{name}.log"))).expect("a log");
    let token = pool.dir.join(format!("{name}.token"));
    pool.token_file(&token, &name, Power::Daemon, Some(&name), 24 * 3600);
    let at = (pool.global_addr.as_str(), pool.secret_path.as_path());
    let mut child = crate::netpool::local_command(net, host, &pool.dir, at)
        .args(["--slots", &pool.slots.to_string()])
        .arg("--config")
        .arg(pool.dir.join("local.toml"))
        .stderr(log)
        .spawn()
        .expect("start carmi-local in its namespace");
    let app_addr = crate::listening_addr(&mut child, &name);
    Local {
        name,
        app_addr,
        attrs: Vec::new(),
        child: Some(child),
    }
}

impl Drop for Managers {
    fn drop(&mut self) {
        if let Some(net) = &self.net {
            for i in 0..net.hosts.len() {
                let _ = std::panic::catch_unwind(|| net.restore(i));
            }
        }
        for c in self.others.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
