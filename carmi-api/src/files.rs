//! Files that hold keys and tokens: written readable by their owner only,
//! and refused when group or others may read or write them, or when they
//! belong to another ordinary user, as ssh refuses a private key with loose
//! permissions, saying which file and how to fix it. A file is opened once
//! and its mode and owner are checked on the open file (`fstat`), then read
//! from that same file: a file swapped between a check and a read is never
//! the one read. A replacing write syncs the directory after its rename, so
//! that a crash does not bring the old file back.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A key or token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Group or others have access.
    #[error(
        "permissions {mode:04o} for {} are too open: a key or token file must be readable by its owner only; fix with `chmod 600 {}`",
        path.display(), path.display()
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It belongs to another ordinary user, who could change it.
    #[error(
        "{} belongs to uid {owner}, neither this daemon's user (uid {me}) nor root: a key or token file must be its reader's own; fix with `chown` to uid {me}",
        path.display()
    )]
    NotOwn {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective user.
        me: u32,
    },
    /// It cannot be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// Reads `path` as text after checking, on the open file, that only its
/// owner may read or write it and that it is this process's user's or root's.
pub fn read_private(path: &Path) -> Result<String, FileError> {
    let mut file = open_checked(path, 0o077)?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|error| FileError::Io {
            path: path.to_path_buf(),
            error,
        })?;
    Ok(text)
}

/// Checks that only the owner of `path` may read or write it, and that the
/// owner is this process's user or root.
pub fn check_private(path: &Path) -> Result<(), FileError> {
    open_checked(path, 0o077).map(drop)
}

/// Checks that others (neither the owner nor the group) may not read or
/// write the pool secret's file `path`: a daemon may read it through a
/// group of its own (a global RM run as `carmi`), but a job's slot user,
/// in no such group, must not.
pub fn check_shared_key(path: &Path) -> Result<(), FileError> {
    open_checked(path, 0o007).map(drop)
}

/// Opens `path` for reading and checks the open file: a regular file, no
/// permission bit of `forbidden`, owned by this process's user or root.
fn open_checked(path: &Path, forbidden: u32) -> Result<std::fs::File, FileError> {
    let io = |error| FileError::Io {
        path: path.to_path_buf(),
        error,
    };
    // Never blocks on a FIFO put in a key's place.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(io(std::io::Error::other("not a regular file")));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & forbidden != 0 {
        return Err(FileError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    let me = nix_euid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(FileError::NotOwn {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    Ok(file)
}

/// This process's effective user id.
fn nix_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Writes `text` to a new file `path` with mode 0600 from the moment it
/// exists; an existing file is replaced only if `replace` (by a rename, so
/// it is never seen half written and an old file's looser mode does not carry over).
pub fn write_private(path: &Path, text: &str, replace: bool) -> Result<(), FileError> {
    let io = |error| FileError::Io {
        path: path.to_path_buf(),
        error,
    };
    let target = if replace {
        let mut name = path.as_os_str().to_os_string();
        name.push(format!(".tmp-{}", std::process::id()));
        PathBuf::from(name)
    } else {
        path.to_path_buf()
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&target)
        .map_err(io)?;
    let written = (f.write_all(text.as_bytes()))
        .and_then(|()| f.sync_all())
        .and_then(|()| match replace {
            true => std::fs::rename(&target, path),
            false => Ok(()),
        });
    if let Err(e) = written {
        // Half a file is never left behind, nor a temporary one that would
        // stop the next attempt (it is created new).
        let _ = std::fs::remove_file(&target);
        return Err(io(e));
    }
    if replace {
        // The rename is durable only once its directory is.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_others_may_read_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pool.key");
        write_private(&p, "k\n", false).unwrap();
        assert_eq!(read_private(&p).unwrap(), "k\n");
        assert!(
            write_private(&p, "again", false).is_err(),
            "never overwritten silently"
        );
        write_private(&p, "new\n", true).unwrap();
        assert_eq!(read_private(&p).unwrap(), "new\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_private(&p).unwrap_err().to_string();
        assert!(e.contains("permissions 0644"), "{e}");
        assert!(e.contains(&format!("chmod 600 {}", p.display())), "{e}");
        // Not a regular file: refused without blocking on it.
        let fifo = dir.path().join("fifo.key");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = read_private(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // The pool secret may be shared with the daemon's group, not others.
        assert!(check_shared_key(&p).is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(check_shared_key(&p).is_ok());
        assert!(check_private(&p).is_err());
    }

    #[test]
    fn a_key_of_another_ordinary_user_is_refused() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to give a file to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pool.key");
        write_private(&p, "k\n", false).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let e = read_private(&p).unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
        std::os::unix::fs::chown(&p, Some(0), None).unwrap();
        assert_eq!(read_private(&p).unwrap(), "k\n");
    }
}
