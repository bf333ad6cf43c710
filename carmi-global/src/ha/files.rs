//! The state directory as the replication copies it: every file but the
//! journal (which travels record by record), temporary files and the
//! manager's own replication notes, found by a scan that compares sizes
//! and modification times with the previous one.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

/// The journal's file name in the state directory.
pub const JOURNAL: &str = "journal.log";
/// The standby's note of the epoch whose whole state its directory holds.
pub const HA_STATE: &str = "ha-state";

/// What a file looked like at the last scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

/// The state directory's replicated files and their stamps, by relative path.
pub type Listing = BTreeMap<String, Stamp>;

/// Whether `rel` (a path relative to the state directory) is replicated
/// file by file: not the journal, not a temporary or the replication's own.
pub fn replicated(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    !(name.starts_with("journal.")
        || name.starts_with("ha-")
        || name.ends_with(".tmp")
        || name.ends_with(".partial")
        || name.starts_with('.'))
}

/// Lists the replicated files under `dir`.
pub fn scan(dir: &Path) -> std::io::Result<Listing> {
    let mut out = Listing::new();
    walk(dir, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Listing) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let rel = format!("{prefix}{name}");
        // Files come and go under a running daemon: one gone since the
        // listing is simply not there.
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(&entry.path(), &format!("{rel}/"), out)?;
        } else if meta.is_file() && replicated(&rel) {
            let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
            out.insert(
                rel,
                Stamp {
                    len: meta.len(),
                    mtime_ns,
                    ino: meta.ino(),
                },
            );
        }
    }
    Ok(())
}

/// What changed from `before` to `now`: files new or changed, files gone.
pub fn changes(before: &Listing, now: &Listing) -> (Vec<String>, Vec<String>) {
    let changed = now
        .iter()
        .filter(|(path, stamp)| before.get(*path) != Some(stamp))
        .map(|(path, _)| path.clone())
        .collect();
    let gone = before
        .keys()
        .filter(|path| !now.contains_key(*path))
        .cloned()
        .collect();
    (changed, gone)
}

/// `rel` joined under `dir`, if it is a plain relative path that stays
/// inside it (a peer's word is checked, never trusted).
pub fn inside(dir: &Path, rel: &str) -> Option<std::path::PathBuf> {
    let path = Path::new(rel);
    let plain = !rel.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| dir.join(path))
}

/// Writes `bytes` to `path` whole or not at all (a temporary, synced, then
/// renamed over it), creating its directory; readable by this user only,
/// as the state directory's keys must be.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".ha.tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_sees_new_changed_and_gone_files_but_not_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL), "x").unwrap();
        std::fs::write(dir.path().join("job-ids"), "64").unwrap();
        std::fs::create_dir(dir.path().join("executables")).unwrap();
        std::fs::write(dir.path().join("executables/ab"), "exe").unwrap();
        let first = scan(dir.path()).unwrap();
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            ["executables/ab", "job-ids"]
        );
        std::fs::write(dir.path().join("job-ids"), "128").unwrap();
        std::fs::remove_file(dir.path().join("executables/ab")).unwrap();
        let second = scan(dir.path()).unwrap();
        let (changed, gone) = changes(&first, &second);
        assert_eq!(changed, ["job-ids"]);
        assert_eq!(gone, ["executables/ab"]);
    }

    #[test]
    fn only_plain_relative_paths_are_taken() {
        let dir = Path::new("/state");
        assert_eq!(inside(dir, "a/b"), Some(dir.join("a/b")));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./a"] {
            assert_eq!(inside(dir, bad), None, "{bad}");
        }
    }
}
