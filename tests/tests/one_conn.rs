//! One typed connection (issue 14): every daemon and client reads and
//! writes frames through `carmi_api::conn` (`Conn`, `ConnReader`,
//! `ConnWriter`), never by hand with `frame::write_frame` or
//! `FrameReader::read`/`read_raw`, so that a connection cannot send a message
//! of another kind and keeps its frame limit and deadline. Read from the
//! sources: a new connection kind that hand-rolls its frames fails here,
//! named with file:line.
//!
//! Allowed: carmi-api's `frame.rs` (the helpers themselves), `conn.rs` (built
//! on them) and `handshake.rs` (which speaks its own messages before the
//! connection's kind is settled, on `Conn::parts_mut`); and test code (files
//! named `*_tests.rs` or `tests.rs`, directories named `tests`, and what
//! follows a file's first `#[cfg(test)]`), where tests write malformed frames
//! on purpose.

use std::path::{Path, PathBuf};

/// What hand-rolled frame reading or writing looks like in code.
const HAND_ROLLED: &[&str] = &["write_frame(", ".read_raw(", ".read::<"];

/// Files that may use the frame helpers directly, relative to the workspace.
const ALLOWED: &[&str] = &[
    "carmi-api/src/frame.rs",
    "carmi-api/src/conn.rs",
    "carmi-api/src/handshake.rs",
    "carmi-api/src/handshake/client.rs",
    // Raw protocol clients on purpose: what an attacker or a stripped-down
    // peer sends, frame by frame (the floods' and bounds' tests).
    "testkit/src/raw.rs",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `.rs` files under `dir`, build output left out.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&p, files);
            }
        } else if name.ends_with(".rs") {
            files.push(p);
        }
    }
}

/// Whether a path (relative to the workspace) is test code by its name.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().unwrap().to_string_lossy();
    name.ends_with("_tests.rs")
        || name == "tests.rs"
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// Each line of `text` (before its first `#[cfg(test)]`, comments cut)
/// that reads or writes frames by hand: (line number, the line).
fn hand_rolled(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .enumerate()
        .filter_map(|(i, line)| {
            let code = line.split("//").next().unwrap_or("");
            HAND_ROLLED
                .iter()
                .any(|p| code.contains(p))
                .then(|| (i + 1, line.trim().to_string()))
        })
        .collect()
}

#[test]
fn daemons_and_clients_frame_only_through_conn() {
    let root = workspace_root();
    let mut files = Vec::new();
    walk(&root, &mut files);
    // python/ is outside the workspace but links carmi-api: it counts too.
    let mut read = 0;
    let mut offenders = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap();
        let rel_text = rel.display().to_string();
        if is_test_file(rel) || ALLOWED.contains(&rel_text.as_str()) {
            continue;
        }
        read += 1;
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, code) in hand_rolled(&text) {
            offenders.push(format!("{rel_text}:{line}: {code}"));
        }
    }
    assert!(read > 150, "only {read} source files read");
    assert!(
        offenders.is_empty(),
        "frames read or written by hand instead of through carmi_api::conn \
         (Conn / ConnReader / ConnWriter):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_check_finds_hand_rolled_frames_and_skips_comments_and_tests() {
    let src = "fn a() {\n    write_frame(&mut w, &m, &[]).await?;\n}\n\
               // r.read::<X>() in a comment\n\
               fn b() { let f = r.read_raw().await; let g = r.read::<X>().await; }\n\
               #[cfg(test)]\nmod tests { fn c() { write_frame(w, m, p); } }\n";
    let found: Vec<usize> = hand_rolled(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, vec![2, 5]);
    assert!(is_test_file(Path::new("carmi-local/tests/daemon.rs")));
    assert!(is_test_file(Path::new("carmi-api/src/stage_tests.rs")));
    assert!(!is_test_file(Path::new("carmi-local/src/peer.rs")));
}
