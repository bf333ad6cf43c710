//! The `classad` command-line tool, run as a user would run it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use classad::{ClassAd, Evaluator, parse_expr};

/// A directory of its own for one test, removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        // Tests of one binary run in parallel threads of one process, and
        // several `cargo test` runs may share the temp dir: the pid and a
        // counter keep each directory apart.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("classad-cli-{}-{n}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    /// Writes `text` to `name` in the directory and returns its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write a temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `classad` with `args`, feeding `stdin` to it.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_classad"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start classad");
    // Written from a thread so that a large output cannot deadlock against
    // a large input.
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = stdin.to_string();
    let writer = std::thread::spawn(move || {
        // The tool may exit without reading stdin; that is not a test failure.
        let _ = pipe.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().expect("wait for classad");
    writer.join().expect("stdin writer");
    out
}

/// Runs `classad` and returns its stdout, failing the test unless it succeeds.
fn ok(args: &[&str], stdin: &str) -> String {
    let out = run(args, stdin);
    assert!(
        out.status.success(),
        "classad {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

#[test]
fn eval_prints_values_in_classad_syntax() {
    assert_eq!(ok(&["eval", r#"strcat("x", 1 + 2)"#], ""), "\"x3\"\n");
    assert_eq!(ok(&["eval", "7 / 2"], ""), "3\n");
    assert_eq!(ok(&["eval", "Missing"], ""), "undefined\n");
    assert_eq!(ok(&["eval", "1 / 0"], ""), "error\n");
    assert_eq!(ok(&["eval", "{ 1, 2 + 3 }"], ""), "{ 1,5 }\n");
}

#[test]
fn eval_with_my_and_target() {
    let dir = TempDir::new("eval");
    let my = dir.file(
        "machine.ad",
        "[ Arch = \"X86_64\"; Memory = 4096; Requirements = TARGET.ImageSize <= Memory * 1024 ]",
    );
    let target = dir.file("job.ad", "# a job\nImageSize = 100000\nOwner = \"bob\"\n");
    let (my, target) = (path(&my), path(&target));
    let eval = |expr: &str| ok(&["eval", "--my", my, "--target", target, expr], "");
    assert_eq!(eval("MY.Requirements"), "true\n");
    assert_eq!(eval("TARGET.Owner"), "\"bob\"\n");
    assert_eq!(eval("Memory * 2"), "8192\n");
    // A bare name that MY lacks is looked up in TARGET.
    assert_eq!(eval("ImageSize"), "100000\n");
    assert_eq!(eval("TARGET.Memory"), "undefined\n");
    assert_eq!(
        ok(&["eval", "--my", my, r#"Arch == "x86_64""#], ""),
        "true\n"
    );
}

#[test]
fn eval_reads_an_ad_from_stdin() {
    let out = ok(&["eval", "--target", "-", "TARGET.Cpus * 2"], "Cpus = 4\n");
    assert_eq!(out, "8\n");
    let out = ok(
        &["eval", "--my", "-", "Memory >= 2048"],
        "[ Memory = 1024 ]",
    );
    assert_eq!(out, "false\n");
}

/// Issue 22: an expression too deep for the parser, and too long for a
/// command line, is a syntax error with a readable message, never a crash.
#[test]
fn a_hundred_thousand_nested_parentheses_from_stdin_are_a_syntax_error() {
    let n = 100_000;
    let deep = format!("{}1{}", "(".repeat(n), ")".repeat(n));
    let out = run(&["eval", "-"], &deep);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nested deeper than"), "{err}");
    assert!(err.contains("from stdin"), "{err}");
    assert!(
        err.len() < 1_000,
        "the context is clipped around the error: {err}"
    );
}

#[test]
fn eval_reads_the_expression_from_stdin() {
    assert_eq!(ok(&["eval", "-"], "1 + 2\n"), "3\n");
    let out = run(&["eval", "--my", "-", "-"], "A = 1\n");
    assert_eq!(out.status.code(), Some(1), "stdin read once only");
}

#[test]
fn eval_refuses_to_read_stdin_twice() {
    let out = run(&["eval", "--my", "-", "--target", "-", "1"], "A = 1\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stdin"));
}

/// Five machines in both syntaxes, with a comment and odd spacing.
const POOL: &str = "\
# a small pool
Name = \"a\"
Memory = 4096
Mips = 100

Name = \"b\"
Memory = 1024
Mips = 900


Name = \"c\"
Memory = 8192
Mips = 300
[ Name = \"d\"; Memory = 2048; Mips = 300 ]
[ Name = \"e\"; Memory = 16384; Mips = \"fast\" ]

Name = \"f\"
Mips = 1000
";

#[test]
fn match_counts_ads_for_which_requirements_are_true() {
    let dir = TempDir::new("count");
    let pool = dir.file("pool.ads", POOL);
    let pool = path(&pool);
    // `f` has no Memory: UNDEFINED is not a match.
    let out = ok(&["match", "--requirements", "Memory >= 2048", pool], "");
    assert_eq!(out, "4 of 6 ads match\n");
    // A non-boolean is not a match either.
    let out = ok(&["match", "--requirements", "Memory", pool], "");
    assert_eq!(out, "0 of 6 ads match\n");
    let out = ok(&["match", "--requirements", "true", pool, pool], "");
    assert_eq!(out, "12 of 12 ads match\n");
}

#[test]
fn match_lists_names_by_rank_with_ties_in_input_order() {
    let dir = TempDir::new("list");
    let pool = dir.file("pool.ads", POOL);
    let out = ok(
        &[
            "match",
            "--requirements",
            "Memory >= 2048",
            "--rank",
            "Mips",
            "--list",
            path(&pool),
        ],
        "",
    );
    // c and d tie at 300 and keep their order; e's rank is a string, so 0.
    assert_eq!(out, "c\nd\na\ne\n4 of 6 ads match\n");
    // Without --rank every ad ranks 0: input order.
    let out = ok(
        &[
            "match",
            "--requirements",
            "Mips > 200",
            "--list",
            path(&pool),
        ],
        "",
    );
    assert_eq!(out, "b\nc\nd\nf\n4 of 6 ads match\n");
}

#[test]
fn match_reads_stdin() {
    let out = ok(
        &["match", "--requirements", "Memory > 2000", "--list", "-"],
        POOL,
    );
    assert_eq!(out, "a\nc\nd\ne\n4 of 6 ads match\n");
    let out = ok(&["match", "--requirements", "true", "-"], "");
    assert_eq!(out, "0 of 0 ads match\n");
}

#[test]
fn syntax_error_in_an_ad_names_file_line_and_column() {
    let dir = TempDir::new("bad-ad");
    // The bad ad starts at line 5; its error is on its second line.
    let bad = dir.file(
        "bad.ads",
        "Name = \"a\"\nMemory = 1\n\n\nName = \"b\"\nMemory = (2 +\nMips = 3\n",
    );
    let out = run(&["match", "--requirements", "true", path(&bad)], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.ads"), "{err}");
    assert!(err.contains("line 6, column 14"), "{err}");
    assert!(err.contains("ad starting at line 5"), "{err}");
    assert!(err.contains("Memory = (2 +"), "{err}");

    let bad = dir.file("bad-new.ads", "[ A = 1 ]\n[ A = 1; B = * ]\n");
    let out = run(&["match", "--requirements", "true", path(&bad)], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2, column 14"), "{err}");
}

#[test]
fn syntax_error_in_an_expression_exits_2() {
    let out = run(&["eval", "1 + * 2"], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1, column 5"), "{err}");

    let out = run(&["match", "--requirements", "Memory >=", "-"], "A = 1\n");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--requirements"), "{err}");
    assert!(err.contains("column 10"), "{err}");

    let dir = TempDir::new("bad-my");
    let my = dir.file("my.ad", "[ A = 1;\n  B = ) ]\n");
    let out = run(&["eval", "--my", path(&my), "A"], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("my.ad at line 2, column 7"), "{err}");
}

#[test]
fn a_missing_file_exits_1() {
    let out = run(
        &["match", "--requirements", "true", "/nonexistent/pool"],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/pool"));
}

#[test]
fn synth_writes_the_library_pool() {
    assert_eq!(
        ok(&["synth", "--count", "40"], ""),
        classad::synth::machines_old_syntax(40)
    );
}

/// Large enough that `match` cuts the input into pieces and works on all
/// cores; the answer must be what a plain serial loop over the ads gives.
#[test]
fn synth_output_matches_like_a_serial_loop() {
    const N: u64 = 4000;
    let dir = TempDir::new("synth");
    let text = ok(&["synth", "--count", &N.to_string()], "");
    let pool = dir.file("pool.ads", &text);
    let req = r#"Arch == "X86_64" && Memory >= 2048"#;
    let rank = "Mips + KFlops / 1000";

    let (req_e, rank_e) = (parse_expr(req).unwrap(), parse_expr(rank).unwrap());
    let mut expected: Vec<(f64, String)> = Vec::new();
    for chunk in text.split("\n\n").filter(|c| !c.trim().is_empty()) {
        let ad = ClassAd::parse_old(chunk).expect("synthetic ads parse");
        let mut ev = Evaluator::new(Some(&ad), None);
        if ev.eval_top(&req_e).is_true() {
            let r = ev.eval_top(&rank_e).as_f64().unwrap_or(0.0);
            let name = ad.eval_attr("Name");
            expected.push((r, name.as_str().expect("names are strings").to_string()));
        }
    }
    expected.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
    assert!(!expected.is_empty());

    let out = ok(
        &[
            "match",
            "--requirements",
            req,
            "--rank",
            rank,
            "--list",
            path(&pool),
        ],
        "",
    );
    let mut want: String = expected.iter().map(|(_, n)| format!("{n}\n")).collect();
    want.push_str(&format!("{} of {N} ads match\n", expected.len()));
    assert_eq!(out, want);
}

/// An error far into a large input is reported at its place in the file,
/// whichever piece of the input it falls in.
#[test]
fn error_deep_in_a_large_input_has_the_file_line() {
    let dir = TempDir::new("deep");
    let mut text = classad::synth::machines_old_syntax(3000);
    let good_lines = text.lines().count();
    text.push_str("Name = \"bad\"\nMemory = 1 +\n\n");
    text.push_str(&classad::synth::machines_old_syntax(500));
    let pool = dir.file("pool.ads", &text);
    let out = run(&["match", "--requirements", "true", path(&pool)], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "line {}, column 13 (in the ad starting at line {})",
        good_lines + 2,
        good_lines + 1
    );
    assert!(err.contains(&want), "want {want}: {err}");
}
