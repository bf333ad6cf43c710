//! Exactly once under random SIGKILLs (issue 24, item 6): during a WoDi run
//! on a real pool (`carmi_tests::Pool`: global and local RMs as processes),
//! the test SIGKILLs, at random moments, a local RM (its machine's workers
//! die with it, `PR_SET_PDEATHSIG`) that it starts again at once or at the
//! next round (the global RM then declares the machine lost), the master
//! process, or the WoDi server process. A master killed, or left without its
//! server, is started again and resumes after its last checkpointed cycle.
//!
//! The master (`wodi-test-master`) checks before it checkpoints a cycle that
//! every step came back exactly once with that cycle's data; the test then
//! checks over all the master's lives that each cycle was completed once,
//! in order, none lost, and that only the server's kills cost a master its
//! run. Rounds: `WODI_KILL_ROUNDS` (3 by default, about a minute), seed:
//! `WODI_KILL_SEED` (random by default, printed), e.g.
//! `WODI_KILL_ROUNDS=30 cargo test -p wodi --test kills -- --nocapture`.
//!
//! Machine m0 is never killed: the server's CARMI connection goes through
//! its local RM (the submit machine), whose loss ends the job by design.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use carmi_tests::Pool;

/// Machines of the pool (m0 submits, m1.. may be killed) and hosts asked for.
const MACHINES: usize = 5;
const HOSTS: u32 = 4;
/// Steps per cycle and each step's sleep, ms.
const STEPS: u32 = 8;
const STEP_MS: u32 = 100;

/// A small xorshift generator: the seed, printed, replays a failing run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

struct Run {
    checkpoint: String,
    log: String,
    stderr: std::path::PathBuf,
    cycles: u64,
}

impl Run {
    fn start_master(&self, pool: &Pool) -> Child {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_wodi-test-master"))
            .arg(&pool.locals[0].app_addr)
            .arg(&pool.secret_path)
            .arg(env!("CARGO_BIN_EXE_wodi-server"))
            .arg(env!("CARGO_BIN_EXE_wodi-test-worker"))
            .arg(&self.checkpoint)
            .arg(&self.log)
            .arg(self.cycles.to_string())
            .args([HOSTS, STEPS, STEP_MS].map(|n| n.to_string()))
            .env("CARMI_TOKEN", &pool.admin_token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start wodi-test-master")
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Fails the test with the master's log and stderr and the pool's logs.
    fn fail(&self, pool: &Pool, seed: u64, what: &str) -> ! {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        panic!(
            "{what}\nseed {seed}\n{:#?}\n--- master stderr\n{stderr}\n{}",
            self.lines(),
            pool.logs()
        )
    }

    fn errors(&self) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with("error"))
            .count()
    }

    fn done(&self) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with("done "))
            .count()
    }
}

/// The children of `pid` named `name` (the master's server).
fn children_named(pid: u32, name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or("");
        let ppid = tail.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(pid) && name.starts_with(comm) {
            found.push(child);
        }
    }
    found
}

fn sigkill(pid: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// Checks the master's log over all its lives: cycles completed once each,
/// in order, from 0 to the last; a life resumes after the last checkpointed
/// cycle (or the one after it, when the kill came between the checkpoint
/// and its `done` line). Returns the number of `error` lines.
fn check_log(lines: &[String], cycles: u64) -> usize {
    let mut last: Option<u64> = None;
    let mut errors = 0;
    for l in lines {
        let (word, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        let num = || rest.split(' ').next().unwrap().parse::<u64>().unwrap();
        let next = last.map_or(0, |c| c + 1);
        match word {
            "VIOLATION" => panic!("{l}\n{lines:#?}"),
            "done" => assert_eq!(num(), next, "a cycle lost or done twice: {lines:#?}"),
            "resume" => {
                let c = num();
                assert!(
                    Some(c) == last || c == next,
                    "resumed after {c}, last done {last:?}: {lines:#?}"
                );
                last = Some(c);
                continue;
            }
            "error" => errors += 1,
            _ => {}
        }
        if word == "done" {
            last = Some(num());
        }
    }
    assert_eq!(last, Some(cycles - 1), "not every cycle done: {lines:#?}");
    assert_eq!(lines.last().map(String::as_str), Some("complete"));
    errors
}

#[test]
fn every_step_once_per_cycle_while_local_rms_masters_and_servers_are_killed() {
    let rounds = env_u64("WODI_KILL_ROUNDS").unwrap_or(3);
    let seed = env_u64("WODI_KILL_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64
    });
    eprintln!("WODI_KILL_SEED={seed} WODI_KILL_ROUNDS={rounds}");
    let mut rng = Rng(seed | 1);
    let mut pool = Pool::start("wodi-kills", 1, &vec![Vec::new(); MACHINES]);
    pool.wait_registered();
    let dir = pool.dir.clone();
    let run = Run {
        checkpoint: dir.join("master.checkpoint").to_string_lossy().into(),
        log: dir.join("master.log").to_string_lossy().into(),
        stderr: dir.join("master.stderr"),
        cycles: 3 * rounds + 3,
    };
    let mut master = run.start_master(&pool);
    let (mut server_kills, mut kills) = (0usize, Vec::new());
    // A machine killed and left down until the next round: the global RM
    // declares it lost (rather than seeing it register again at once).
    let mut down: Option<usize> = None;
    for round in 0..rounds {
        if let Some(i) = down.take() {
            pool.restart_local(i);
        }
        // Progress between kills: a cycle completed since the last one.
        let before = run.done();
        let deadline = Instant::now() + Duration::from_secs(60);
        while run.done() == before {
            if let Some(status) = master.try_wait().unwrap() {
                match status.code() {
                    Some(1) => master = run.start_master(&pool),
                    _ => run.fail(
                        &pool,
                        seed,
                        &format!("round {round}: the master ended: {status}"),
                    ),
                }
            }
            if Instant::now() > deadline {
                run.fail(
                    &pool,
                    seed,
                    &format!("round {round}: no cycle done within 60 s"),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.below(1200)));
        let what = match rng.below(4) {
            0 => {
                master.kill().unwrap();
                master.wait().unwrap();
                master = run.start_master(&pool);
                "master".to_string()
            }
            1 => match children_named(master.id(), "wodi-server").first() {
                Some(&pid) => {
                    sigkill(pid);
                    server_kills += 1;
                    "server".to_string()
                }
                None => "server (not running)".to_string(),
            },
            _ => {
                let i = 1 + rng.below(MACHINES as u64 - 1) as usize;
                if rng.below(2) == 0 {
                    pool.restart_local(i);
                    format!("local RM m{i}, started again at once")
                } else {
                    pool.kill_local(i);
                    down = Some(i);
                    format!("local RM m{i}, down until the next round")
                }
            }
        };
        eprintln!("round {round}: killed the {what} after cycle {before}");
        kills.push(what);
    }
    if let Some(i) = down.take() {
        pool.restart_local(i);
    }
    // No more kills: the run ends by itself (a master whose server was
    // killed in the last round is started once more).
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = master.try_wait().unwrap() {
            if status.code() == Some(1) && run.errors() <= server_kills {
                master = run.start_master(&pool);
                continue;
            }
            break status;
        }
        if Instant::now() > deadline {
            let _ = master.kill();
            run.fail(
                &pool,
                seed,
                "the run did not end within 120 s after the last kill",
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !status.success() {
        run.fail(&pool, seed, &format!("the master ended: {status}"));
    }
    let errors = check_log(&run.lines(), run.cycles);
    assert!(
        errors <= server_kills,
        "{errors} master lives ended in an error, {server_kills} servers killed ({kills:?}): {:#?}",
        run.lines()
    );
    eprintln!("kills: {kills:?}; {} cycles done", run.cycles);
}
