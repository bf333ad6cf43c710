//! `carmi-owner-bench soak [CYCLES]`: owner arrive/leave cycles without end
//! over the same real processes (a shell and its child on each of 4 slots),
//! each cycle waiting until every process is stopped (`T`) and then running
//! again. Every 10% it prints progress, the local and global RMs' resident
//! memory and open descriptors; at the end it fails, saying why, if a
//! process died, the job lost a host, or a daemon grew (memory over twice
//! its size after the first 10%, or descriptors by more than 16).

use std::time::{Duration, Instant};

use carmi_api::control::OwnerLink;
use carmi_api::msg::OwnerEvent;

use super::{Result, families, owner_pool, wait_states};

/// A daemon's resident memory (KiB) and open descriptors, from `/proc`.
fn footprint(pid: u32) -> Option<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// The pid of the daemon `name` (`carmi-global` or `carmi-local`) whose
/// command line mentions `dir`.
fn daemon_pid(name: &str, dir: &std::path::Path) -> Option<u32> {
    let dir = dir.to_string_lossy();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains(name) && cmd.contains(&*dir)).then_some(pid)
    })
}

pub(super) async fn soak(cycles: usize) -> Result<()> {
    // CONTINUE 50 ms after the owner leaves: a cycle costs what CARMI does.
    let pool = owner_pool("owner-soak", 0.01);
    // Processes that outlive any soak (a 300 s child ended the first one).
    let (carmi, mut events, pids) = families(&pool, 100_000_000).await?;
    // Events are taken as they come: an application that stops reading is
    // disconnected by its local RM, which would end the soak for the wrong reason.
    let drain = tokio::spawn(async move {
        let mut n = 0usize;
        while events.next().await.is_some() {
            n += 1;
        }
        n
    });
    let local = daemon_pid("carmi-local", &pool.dir).ok_or("no local RM")?;
    let global = daemon_pid("carmi-global", &pool.dir).ok_or("no global RM")?;
    let mut owner = OwnerLink::connect(&pool.locals[0].app_addr, &pool.secret).await?;
    println!(
        "Command: `cargo run --release -p carmi-benches --bin carmi-owner-bench -- soak {cycles}` \
         (1 machine, {} processes)\n",
        pids.len()
    );
    println!(
        "| cycles | elapsed (s) | cycle median (ms) | local RSS (MB) / fds | global RSS (MB) / fds |"
    );
    println!("|---|---|---|---|---|");
    let t0 = Instant::now();
    let step = (cycles / 10).max(1);
    let mut times = Vec::with_capacity(step);
    let mut baseline = None;
    for cycle in 1..=cycles {
        let t = Instant::now();
        owner.send(OwnerEvent::Arrive).await?;
        let watched = pids.clone();
        tokio::task::spawn_blocking(move || wait_states(&watched, |s| s == Some('T'))).await??;
        owner.send(OwnerEvent::Leave).await?;
        let watched = pids.clone();
        tokio::task::spawn_blocking(move || {
            wait_states(&watched, |s| matches!(s, Some('S' | 'R')))
        })
        .await?
        .map_err(|e| format!("cycle {cycle}: {e}"))?;
        times.push(t.elapsed());
        if cycle % step == 0 || cycle == cycles {
            times.sort();
            let median = times[times.len() / 2];
            times.clear();
            let (l, g) = (footprint(local), footprint(global));
            let (Some(l), Some(g)) = (l, g) else {
                return Err(format!("cycle {cycle}: a daemon is gone").into());
            };
            println!(
                "| {cycle} | {:.0} | {:.2} | {:.1} / {} | {:.1} / {} |",
                t0.elapsed().as_secs_f64(),
                median.as_secs_f64() * 1e3,
                l.0 as f64 / 1024.0,
                l.1,
                g.0 as f64 / 1024.0,
                g.1
            );
            let base = *baseline.get_or_insert((l, g));
            let grew =
                |now: (u64, usize), then: (u64, usize)| now.0 > 2 * then.0 || now.1 > then.1 + 16;
            if grew(l, base.0) || grew(g, base.1) {
                return Err(format!(
                    "cycle {cycle}: a daemon grew: local {l:?} from {:?}, global {g:?} from {:?}",
                    base.0, base.1
                )
                .into());
            }
        }
    }
    drop(carmi);
    let events = tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .map(|n| n.unwrap_or(0))
        .unwrap_or(0);
    println!(
        "\n{cycles} cycles in {:.0} s, every process alive and stopped/resumed each time; the application took {events} events.\n",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
