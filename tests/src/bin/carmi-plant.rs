//! A job's process that tries to make its root local RM write, hand over or
//! read a file of the machine for it (`tests/tests/sandbox_links.rs`): it
//! plants symbolic links, named as the files the local RM puts into a
//! sandbox, in the sandbox of the next process of its job
//! (`../<CARMI_PROCESS + 1>/`), as soon as its account may write there (or
//! earlier, by making that directory itself), and keeps trying to read their
//! targets, until it is killed or a minute has passed. It prints `ready`,
//! then one line for each thing it managed (`planted NAME`, `read NAME`)
//! and for each way in that was closed (`no way to make ...`).
//!
//! Arguments: `TARGET_DIR NAME...`: plants `NAME -> TARGET_DIR/NAME`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((target_dir, names)) = args.split_first() else {
        eprintln!("carmi-plant: TARGET_DIR NAME...");
        std::process::exit(2);
    };
    let target_dir = PathBuf::from(target_dir);
    let me: u64 = std::env::var("CARMI_PROCESS")
        .ok()
        .and_then(|p| p.parse().ok())
        .expect("CARMI_PROCESS");
    let next = Path::new("..").join((me + 1).to_string());
    say("ready");
    // Before it exists: the directory of sandboxes is root's.
    match std::fs::create_dir(&next) {
        Ok(()) => say(&format!("made {}", next.display())),
        Err(e) => say(&format!("no way to make {}: {e}", next.display())),
    }
    match std::os::unix::fs::symlink(&target_dir, &next) {
        Ok(()) => say(&format!("made {} a link", next.display())),
        Err(e) => say(&format!("no way to make {} a link: {e}", next.display())),
    }
    let mut planted = vec![false; names.len()];
    let mut read = vec![false; names.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        for (i, name) in names.iter().enumerate() {
            let target = target_dir.join(name);
            if !planted[i] && std::os::unix::fs::symlink(&target, next.join(name)).is_ok() {
                planted[i] = true;
                say(&format!("planted {name}"));
            }
            if !read[i] && std::fs::File::open(&target).is_ok() {
                read[i] = true;
                say(&format!("read {name}"));
            }
        }
    }
}
