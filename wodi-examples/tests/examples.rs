//! Each example run briefly on its embedded pool, checking its result.

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
