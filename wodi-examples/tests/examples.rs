//! Each example run briefly on its embedded pool, checking its result; and
//! the main job interrupted part-way (Ctrl-C), checking that it leaves no
//! process and no pool folder behind.

use std::path::PathBuf;
use std::process::Command;

fn run(exe: &str, args: &[&str]) -> String {
    let out = Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{exe}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{exe} {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn pi_is_within_tolerance() {
    let out = run(
        env!("CARGO_BIN_EXE_pi"),
        &["--steps", "12", "--samples", "100000", "--hosts", "3"],
    );
    let pi: f64 = out
        .split_whitespace()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no estimate in {out:?}"));
    // 1.2 million points: the standard error is about 0.0015.
    assert!((pi - std::f64::consts::PI).abs() < 0.01, "{out}");
    assert!(out.contains("in 12 steps"), "{out}");
}

#[test]
fn materials_returns_every_step_once_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        env!("CARGO_BIN_EXE_materials"),
        &[
            "--cycles",
            "3",
            "--hosts",
            "6",
            "--scale",
            "0.0005",
            "--out",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(out.contains("cycle   3/3"), "{out}");
    // Plain lines (stdout is a pipe here) carry the server's live status: by
    // the last cycle the run holds hosts, which it can only know from a
    // status report.
    let last = out.lines().find(|l| l.starts_with("cycle   3/3")).unwrap();
    let held: u32 = last
        .split("hosts")
        .nth(1)
        .and_then(|s| s.split('(').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no host count in {last:?}"));
    assert!(held >= 1, "{last}");
    assert!(
        !out.contains('\r'),
        "a progress bar was drawn into a pipe: {out:?}"
    );
    let json = std::fs::read(dir.path().join("materials-stats.json")).unwrap();
    let stats: wodi::Stats = serde_json::from_slice(&json).unwrap();
    assert_eq!(stats.steps_delivered, 3 * 31);
    assert!(stats.step_copies >= stats.steps_delivered);
    assert_eq!(stats.cycles.iter().filter(|c| c.end_s.is_some()).count(), 3);
    // The table shows the JSON's numbers.
    let row = out.lines().find(|l| l.contains("steps delivered")).unwrap();
    assert_eq!(row.split_whitespace().last(), Some("93"), "{out}");
    // Efficiency is the paper's, busy time over occupancy, in the JSON as in the table.
    let busy: f64 = stats.steps.iter().map(|s| s.wall_s).sum();
    assert!(stats.busy_time_s > 0.0 && (stats.busy_time_s - busy).abs() < 1e-6);
    let efficiency = stats.busy_time_s / stats.occupancy_s;
    assert!((stats.efficiency - efficiency).abs() < 1e-9, "{stats:?}");
    assert!((stats.cpu_efficiency - stats.cpu_time_s / stats.occupancy_s).abs() < 1e-9);
    let row = (out.lines())
        .find(|l| l.trim_start().starts_with("efficiency"))
        .unwrap();
    let shown = format!("{:.1} %", efficiency * 100.0);
    assert!(row.contains(&shown), "{row} vs {shown}");
    let svg = std::fs::read_to_string(dir.path().join("materials-timeline.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{svg:.100}"
    );
}

#[test]
fn commands_counts_the_lines_of_each_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "1\n2\n3\n").unwrap();
    std::fs::write(dir.path().join("b 'q'.txt"), "only\n").unwrap();
    let out = run(
        env!("CARGO_BIN_EXE_commands"),
        &[dir.path().to_str().unwrap(), "--hosts", "2"],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].trim_start().starts_with("3 ") && lines[0].ends_with("a.txt"),
        "{out}"
    );
    assert!(
        lines[1].trim_start().starts_with("1 ") && lines[1].ends_with("b 'q'.txt"),
        "{out}"
    );
}

#[test]
fn mandelbrot_tiles_make_the_whole_image() {
    let dir = tempfile::tempdir().unwrap();
    let png_path = dir.path().join("m.png");
    let (w, h, iter) = (200u32, 150u32, 300u32);
    let out = run(
        env!("CARGO_BIN_EXE_mandelbrot"),
        &[
            "--width",
            &w.to_string(),
            "--height",
            &h.to_string(),
            "--tile",
            "48",
            "--max-iter",
            &iter.to_string(),
            "--hosts",
            "3",
            "--out",
            png_path.to_str().unwrap(),
        ],
    );
    // The tiles put together are the image computed in one piece here.
    let whole = wodi_examples::kernels::mandelbrot_tile(
        wodi_examples::kernels::View::default(),
        w,
        (0, 0, w, h),
        iter,
    );
    let sum = format!("checksum {:016x}", wodi_examples::kernels::fnv1a(&whole));
    assert!(out.contains(&sum), "{out} (expected {sum})");
    assert!(out.contains("200x150 image"), "{out}");
    // 5 x 4 tiles of 48 pixels cover 200 x 150.
    assert!(out.contains(", 20 tiles"), "{out}");
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let info = decoder.read_info().unwrap();
    assert_eq!((info.info().width, info.info().height), (w, h));
}

/// Environment variable that marks every process of one interrupted run:
/// children inherit it (the WoDi server from the master, the workers from
/// the in-process local RMs), so a process carrying it after the run has
/// exited was left behind, whoever its parent is by then.
const TAG_VAR: &str = "WODI_EXAMPLES_TEST_RUN";

/// Pids of the live processes whose environment holds `TAG_VAR=tag`.
fn tagged_processes(tag: &str) -> Vec<u32> {
    let needle = format!("{TAG_VAR}={tag}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Unreadable (gone, or a zombie whose memory is released): not running.
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Starts `materials` on a short, endless-looking run in its own process
/// group, waits until it has finished two cycles (pool, server and workers
/// all running), sends SIGINT to the whole group (what Ctrl-C on a terminal
/// does) or to the process alone (`kill -INT`), and checks that it exits
/// with status 130 and its message, leaving no process and no pool folder.
fn interrupt_materials(whole_group: bool) {
    use std::io::BufRead;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let tag = format!("{}-{}-{whole_group}", std::process::id(), rand_suffix());
    let mut child = Command::new(env!("CARGO_BIN_EXE_materials"))
        .args(["--cycles", "1000", "--hosts", "4", "--scale", "0.0005"])
        .arg("--out")
        .arg(tmp.path())
        // The embedded pool makes its folder under the temporary directory.
        .env("TMPDIR", tmp.path())
        .env(TAG_VAR, &tag)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Hang guards only (the run itself takes a few seconds).
    let give_up = |child: &mut std::process::Child, why: String| -> ! {
        // SAFETY: a plain signal to the group this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
        panic!("{why}");
    };
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let second = line.starts_with("cycle   2/");
                seen.push(line);
                if second {
                    break;
                }
            }
            Err(e) => give_up(&mut child, format!("no second cycle ({e}): {seen:?}")),
        }
    }
    let running = tagged_processes(&tag);
    // The master, its WoDi server and at least one worker.
    assert!(running.len() >= 3, "only {running:?} run: {seen:?}");
    let pools: Vec<_> = pool_folders(tmp.path());
    assert_eq!(pools.len(), 1, "{pools:?}");

    let target = if whole_group { -pid } else { pid };
    // SAFETY: a plain signal to the process (group) this test started.
    assert_eq!(unsafe { libc::kill(target, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            give_up(&mut child, "still running 30 s after SIGINT".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "{status:?} {:?}\n{stderr}",
        status.signal()
    );
    assert!(
        stderr.contains("interrupted: shutting down"),
        "stderr: {stderr}"
    );
    // Nothing of the run is left: no process (server, workers), no folder.
    let left = tagged_processes(&tag);
    if !left.is_empty() {
        for &p in &left {
            // SAFETY: a plain signal to a leftover of this test's run.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        panic!("processes left behind: {left:?}\nstderr: {stderr}");
    }
    assert_eq!(pool_folders(tmp.path()), Vec::<PathBuf>::new());
    // An interrupted run writes no results.
    assert!(!tmp.path().join("materials-stats.json").exists());
}

/// The embedded pools' folders directly under `dir`.
fn pool_folders(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(carmi_pool::sweep::DIR_PREFIX)
        })
        .map(|e| e.path())
        .collect()
}

/// A few random hex digits, so that runs of this test never share a tag.
fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos:08x}")
}

#[test]
fn ctrl_c_stops_the_run_and_leaves_nothing_behind() {
    interrupt_materials(true);
}

#[test]
fn sigint_to_the_master_alone_stops_the_run_and_leaves_nothing_behind() {
    interrupt_materials(false);
}
