//! The `scale` benchmark's machines outside its own process (issue 36): the
//! fleet spread over worker processes (each under the open-file limit a
//! single process has on many hosts), and relays (`carmi-relay`, each its
//! own process) between them and the global RM.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use carmi_api::handshake::Secret;
use carmi_api::token::SigningKey;
use carmi_testkit::{Fleet, FleetOptions, Pool, Relay};

use super::Result;
use super::scale::ScaleRun;

/// The argument that makes `carmi-bench` a fleet worker.
pub(super) const FLEET_WORKER: &str = "fleet-worker";

/// Worker processes the fleet is spread over: one of them silenced is a
/// tenth of the pool.
const WORKERS: usize = 10;

/// Relays and fleet workers of one pool size, stopped when dropped.
pub(super) struct Spread {
    pub relays: Vec<Relay>,
    workers: Vec<Worker>,
}

struct Worker {
    child: Child,
    machines: usize,
}

impl Spread {
    /// Starts `run.relays` relays in front of `pool`'s global RM, then the
    /// machines beyond the `run.jobs` the benchmark keeps in its own process
    /// in [`WORKERS`] processes, and waits until each has registered its own.
    pub fn start(pool: &Pool, run: &ScaleRun) -> Result<Spread> {
        let relays: Vec<Relay> = (0..run.relays)
            .map(|i| pool.start_relay(&format!("relay{i}"), &[]))
            .collect();
        let mut spread = Spread {
            relays,
            workers: Vec::new(),
        };
        let addr = spread.addr(pool);
        let rest = run.machines.saturating_sub(run.jobs);
        let exe = std::env::current_exe()?;
        for w in 0..WORKERS {
            let machines = rest / WORKERS + usize::from(w < rest % WORKERS);
            if machines == 0 {
                continue;
            }
            let child = Command::new(&exe)
                .arg(FLEET_WORKER)
                .args([&addr, &format!("w{w}-"), &machines.to_string()])
                .arg(run.slots.to_string())
                .arg(&pool.secret_path)
                .arg(pool.dir.join("pool.key"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            spread.workers.push(Worker { child, machines });
        }
        for w in &mut spread.workers {
            let mut line = String::new();
            BufReader::new(w.child.stdout.as_mut().ok_or("no worker stdout")?)
                .read_line(&mut line)?;
            if line.trim() != "ready" {
                return Err(format!("a fleet worker said {line:?} instead of ready").into());
            }
        }
        Ok(spread)
    }

    /// Where machines connect: the relays, else the global RM.
    pub fn addr(&self, pool: &Pool) -> String {
        if self.relays.is_empty() {
            return pool.global_addr.clone();
        }
        let addrs: Vec<&str> = self.relays.iter().map(|r| r.addr.as_str()).collect();
        addrs.join(",")
    }

    /// Stops the first worker (SIGSTOP): its machines fall silent with their
    /// connections open, as hosts cut off by the network. How many.
    pub fn silence_one(&self) -> usize {
        let Some(w) = self.workers.first() else {
            return 0;
        };
        let _ = Command::new("kill")
            .args(["-STOP", &w.child.id().to_string()])
            .status();
        w.machines
    }

    /// Process ids of the relays and workers, each with what it is.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let relays = self.relays.iter().map(|r| (r.name.clone(), r.pid()));
        let workers = (self.workers.iter().enumerate())
            .map(|(i, w)| (format!("fleet worker {i}"), w.child.id()));
        relays.chain(workers).collect()
    }
}

impl Drop for Spread {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let id = w.child.id().to_string();
            let _ = Command::new("kill").args(["-CONT", &id]).status();
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

/// Open files of process `pid`.
pub(super) fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `carmi-bench fleet-worker ADDRS PREFIX MACHINES SLOTS SECRET_FILE KEY_FILE`:
/// registers a fleet, says `ready`, and holds it until its standard input closes.
pub(super) fn fleet_worker(args: &[String]) -> ExitCode {
    match worker(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench fleet-worker: {e}");
            println!("failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn worker(args: &[String]) -> Result<()> {
    let [addr, prefix, machines, slots, secret, key] = args else {
        return Err("usage: fleet-worker ADDRS PREFIX MACHINES SLOTS SECRET_FILE KEY_FILE".into());
    };
    let machines: usize = machines.parse()?;
    super::scale::raise_fd_limit(machines as u64 + 1_000)?;
    let secret = Secret::from_file(std::path::Path::new(secret))?;
    let key = SigningKey::from_text(std::fs::read_to_string(key)?.trim())?;
    // The workers share the handshakes a daemon allows one address (they
    // all dial from 127.0.0.1) as one fleet did.
    let options = FleetOptions {
        machines,
        slots: slots.parse()?,
        prefix: prefix.clone(),
        parallel: (FleetOptions::default().parallel / WORKERS).max(1),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let fleet = rt.block_on(Fleet::start(addr, &secret, &key, &options))?;
    println!("ready");
    // Held until the benchmark closes our standard input (or dies).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(5), fleet.stop()).await;
    });
    Ok(())
}
