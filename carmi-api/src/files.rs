//! Files that hold keys and tokens: written readable by their owner only,
//! and refused when group or others may read or write them, as ssh refuses
//! a private key with loose permissions, saying which file and how to fix it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    /// It cannot be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// Reads `path` as text after checking that only its owner may read or write it.
pub fn read_private(path: &Path) -> Result<String, FileError> {
    let io = |error| FileError::Io {
        path: path.to_path_buf(),
        error,
    };
    check_private(path)?;
    std::fs::read_to_string(path).map_err(io)
}

/// Checks that only the owner of `path` may read or write it.
pub fn check_private(path: &Path) -> Result<(), FileError> {
    check_mode(path, 0o077)
}

/// Checks that others (neither the owner nor the group) may not read or
/// write the pool secret's file `path`: a daemon may read it through a
/// group of its own (a global RM run as `carmi`), but a job's slot user,
/// in no such group, must not.
pub fn check_shared_key(path: &Path) -> Result<(), FileError> {
    check_mode(path, 0o007)
}

fn check_mode(path: &Path, forbidden: u32) -> Result<(), FileError> {
    let meta = std::fs::metadata(path).map_err(|error| FileError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & forbidden != 0 {
        return Err(FileError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
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
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    if replace {
        std::fs::rename(&target, path).map_err(io)?;
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
        // The pool secret may be shared with the daemon's group, not others.
        assert!(check_shared_key(&p).is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(check_shared_key(&p).is_ok());
        assert!(check_private(&p).is_err());
    }
}
