//! What a job's master sends back to its submit directory when it exits
//! (`output`, `error`, `transfer_output_files`): read from its sandbox before
//! the sandbox is removed, within [`MAX_RETURNED_BYTES`] in all. Each file
//! gets an equal share of what the files before it left; a larger file is
//! cut to its share and marked truncated. A name that leaves the sandbox
//! (absolute, `..`), goes through a symbolic link anywhere on its way, or is
//! not a regular file (a FIFO, which would block the read, a device) is
//! skipped with a warning: the master must not make its local RM read
//! another file of the machine. Each name is opened relative to the
//! sandbox's directory, one component at a time with `O_NOFOLLOW`, so that
//! a link swapped in after a check is never followed either (see
//! `crate::sandbox`, "No way up"); the local RM also reads them as the
//! master's account.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

use carmi_api::limits::{MAX_RETURNED_BYTES, MAX_RETURNED_FILES};
use carmi_api::msg::ReturnedFile;

/// Files read from a sandbox, and their bytes one after the other.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Returned {
    /// The files, in order.
    pub files: Vec<ReturnedFile>,
    /// Their bytes, concatenated (the message's payload).
    pub bytes: Vec<u8>,
}

/// Reads `names` (relative to `sandbox`) for sending back.
pub fn collect(sandbox: &Path, names: &[String]) -> Returned {
    let mut out = Returned::default();
    let names = &names[..names.len().min(MAX_RETURNED_FILES)];
    let Ok(root) = crate::sandbox::open_dir(sandbox) else {
        tracing::warn!(sandbox = %sandbox.display(), "the sandbox is gone; nothing is sent back");
        return out;
    };
    for (i, name) in names.iter().enumerate() {
        let left = MAX_RETURNED_BYTES - out.bytes.len() as u64;
        let share = left / (names.len() - i) as u64;
        match read_one(&root, name, share) {
            Ok((bytes, truncated)) => {
                if truncated {
                    tracing::warn!(
                        name,
                        share,
                        "a file sent back is over its share of the limit; it is cut"
                    );
                }
                out.files.push(ReturnedFile {
                    name: name.clone(),
                    size: bytes.len() as u64,
                    truncated,
                    dest: String::new(),
                });
                out.bytes.extend_from_slice(&bytes);
            }
            Err(e) => tracing::warn!(name, "not sent back: {e}"),
        }
    }
    out
}

/// The first `limit` bytes of `name` inside the directory `root`, and
/// whether there was more.
fn read_one(root: &File, name: &str, limit: u64) -> Result<(Vec<u8>, bool), String> {
    let mut parts = Vec::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => {
                return Err(
                    "the name must stay inside the sandbox (no `/` at the start, no `..`)".into(),
                );
            }
        }
    }
    let Some((last, dirs)) = parts.split_last() else {
        return Err("the name names no file".into());
    };
    let why = |e: nix::Error| match e {
        nix::Error::ELOOP => "a symbolic link, which is not followed".to_string(),
        nix::Error::ENOTDIR => "a symbolic link or a file on its way, not a directory".to_string(),
        nix::Error::ENOENT => "the master left no such file".to_string(),
        e => e.desc().to_string(),
    };
    let mut dir: Option<OwnedFd> = None;
    for part in dirs {
        let at = dir.as_ref().map_or(root.as_fd(), |d| d.as_fd());
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        dir = Some(openat(at, *part, flags, Mode::empty()).map_err(why)?);
    }
    let at = dir.as_ref().map_or(root.as_fd(), |d| d.as_fd());
    // Not blocking on a FIFO: it is refused below, as anything not a file.
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = File::from(openat(at, *last, flags, Mode::empty()).map_err(why)?);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::with_capacity(meta.len().min(limit) as usize);
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok((bytes, meta.len() > limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_inside_the_sandbox_only() {
        let tmp = crate::test_dir::TempDir::new("returned");
        let sb = tmp.path().join("sb");
        std::fs::create_dir_all(sb.join("sub")).unwrap();
        std::fs::write(sb.join("stdout"), b"hello\n").unwrap();
        std::fs::write(sb.join("sub/result.txt"), b"42").unwrap();
        std::fs::write(tmp.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), sb.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), sb.join("up")).unwrap();
        nix::unistd::mkfifo(&sb.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
        let names: Vec<String> = [
            "stdout",
            "sub/result.txt",
            "../secret",
            "/etc/hostname",
            "link",
            "up/secret",
            "up/sb/stdout",
            "pipe",
            "missing",
            "sub",
            ".",
            "",
        ]
        .map(String::from)
        .to_vec();
        let r = collect(&sb, &names);
        let got: Vec<&str> = r.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(got, ["stdout", "sub/result.txt"]);
        assert_eq!(r.bytes, b"hello\n42");
        assert!(r.files.iter().all(|f| !f.truncated));
    }

    #[test]
    fn a_file_over_its_share_is_cut_and_marked() {
        let tmp = crate::test_dir::TempDir::new("returned");
        std::fs::write(tmp.path().join("a"), b"abcdef").unwrap();
        let root = crate::sandbox::open_dir(tmp.path()).unwrap();
        let (bytes, cut) = read_one(&root, "a", 4).unwrap();
        assert_eq!((bytes.as_slice(), cut), (&b"abcd"[..], true));
        let (bytes, cut) = read_one(&root, "a", 6).unwrap();
        assert_eq!((bytes.as_slice(), cut), (&b"abcdef"[..], false));
    }
}
