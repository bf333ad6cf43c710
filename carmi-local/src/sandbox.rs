//! A process's sandbox: its directory, the private copy of its executable,
//! its input files, its job credential and its output files, made before
//! the start. With a slot user ([`crate::isolation`]) the sandbox and all in
//! it belong to that account, mode 0700 (the executable too, so that the
//! account can run it), and the paths a submitter names are opened as the
//! account, never as the daemon.
//!
//! **No way up.** Processes of one job share an account and process ids
//! are sequential, so a job's process can reach the next sandbox of its job
//! the moment that sandbox is the account's, and plant there a symbolic link
//! named as a file the daemon is about to write (`stdout -> /etc/shadow`).
//! So the daemon, root, never writes through a path a job could have been
//! first at:
//! - the directory is made afresh ([`Sandbox::create`]: `mkdirat`, which
//!   refuses one that exists, a link included) in `sandbox/`, which only
//!   root may write, and opened once (`O_DIRECTORY | O_NOFOLLOW`);
//! - every file in it is made relative to that descriptor with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`, its mode set and it handed to the
//!   account through the open file (`fchmod`, `fchown`);
//! - the directory goes to the account last ([`Sandbox::hand_over`]), once
//!   everything in it is written, just before the process starts.
//!
//! What the process leaves is read back the same way: the files sent back
//! ([`crate::returned`]) and the standard output and error kept after the
//! exit ([`keep_output`]) are opened or moved relative to the directory's
//! descriptor, never through a link, and only regular files are taken.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use carmi_api::ids::ProcessId;
use carmi_api::jobcred::JobCredential;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, unlinkat};

use crate::isolation::{Account, as_account};

/// A file or directory of the sandbox that could not be made.
#[derive(Debug)]
pub(crate) struct SandboxError {
    /// The file or directory.
    pub path: PathBuf,
    /// The cause.
    pub error: std::io::Error,
}

/// What a process's sandbox is made of (from its launch).
pub(crate) struct Contents<'a> {
    /// The executable's name (`argv[0]`).
    pub name: &'a str,
    /// The executable to copy in.
    pub program: &'a Path,
    /// Files copied in by file name, from paths the submitter named.
    pub input_files: &'a [PathBuf],
    /// Files copied in from the cache under the given name.
    pub input_copies: &'a [(PathBuf, String)],
}

fn sb_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + use<> {
    let path = path.to_path_buf();
    move |error| SandboxError { path, error }
}

fn nix_err(path: &Path) -> impl FnOnce(nix::Error) -> SandboxError + use<> {
    let path = path.to_path_buf();
    move |e| SandboxError {
        path,
        error: e.into(),
    }
}

/// Opens the directory `path`, not through a link at its end.
pub(crate) fn open_dir(path: &Path) -> std::io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
}

/// A sandbox being made: its directory, open, still root's until
/// [`Sandbox::hand_over`].
pub(crate) struct Sandbox {
    dir: File,
    path: PathBuf,
    account: Option<Account>,
}

impl Sandbox {
    /// Makes the directory `path` afresh (refusing one that exists, or a
    /// link) and opens it.
    pub(crate) fn create(path: &Path, account: Option<&Account>) -> Result<Sandbox, SandboxError> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(SandboxError {
                path: path.into(),
                error: std::io::Error::other("a sandbox needs a directory of sandboxes"),
            });
        };
        fs::create_dir_all(parent).map_err(sb_err(parent))?;
        let parent_dir = open_dir(parent).map_err(sb_err(parent))?;
        // Private to the account; as the daemon's own, as any directory.
        let mode = if account.is_some() { 0o700 } else { 0o777 };
        mkdirat(&parent_dir, name, Mode::from_bits_truncate(mode)).map_err(|e| SandboxError {
            path: path.into(),
            error: match e {
                nix::Error::EEXIST => std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "it exists already, and a process's sandbox is made afresh",
                ),
                e => e.into(),
            },
        })?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&parent_dir, name, flags, Mode::empty()).map_err(nix_err(path))?;
        let dir = File::from(fd);
        if account.is_some() {
            fchmod(dir.as_fd(), Mode::from_bits_truncate(0o700)).map_err(nix_err(path))?;
        }
        Ok(Sandbox {
            dir,
            path: path.into(),
            account: account.cloned(),
        })
    }

    /// A new file `name` in the sandbox, mode `mode`, the account's: made
    /// here, never an existing one nor through a link.
    fn new_file(&self, name: &Path, mode: u32) -> Result<File, SandboxError> {
        let path = self.path.join(name);
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mode = Mode::from_bits_truncate(mode);
        let fd: OwnedFd = openat(&self.dir, name, flags, mode).map_err(|e| SandboxError {
            path: path.clone(),
            error: match e {
                nix::Error::EEXIST => std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the sandbox has a file of that name already (the executable, an input file, an output file or the credential)",
                ),
                e => e.into(),
            },
        })?;
        // Exactly `mode`, whatever the daemon's umask.
        fchmod(fd.as_fd(), mode).map_err(nix_err(&path))?;
        if let Some(a) = &self.account {
            fchown(
                fd.as_fd(),
                Some(Uid::from_raw(a.uid)),
                Some(Gid::from_raw(a.gid)),
            )
            .map_err(nix_err(&path))?;
        }
        Ok(File::from(fd))
    }

    /// Copies `from` into the new file `name` of the sandbox, mode `mode`.
    fn copy_in(&self, from: &mut File, name: &Path, mode: u32) -> Result<(), SandboxError> {
        let mut to = self.new_file(name, mode)?;
        std::io::copy(from, &mut to).map_err(sb_err(&self.path.join(name)))?;
        Ok(())
    }

    /// Puts the executable and the input files in; returns the
    /// executable's path there.
    pub(crate) fn fill(&self, spec: &Contents<'_>) -> Result<PathBuf, SandboxError> {
        let exe = sandbox_file_name(spec.name);
        // A private copy rather than a hard link: a process that rewrote its
        // own file would otherwise corrupt the cache for every later job.
        let mut program = File::open(spec.program).map_err(sb_err(spec.program))?;
        self.copy_in(&mut program, Path::new(&exe), 0o700)?;
        for input in spec.input_files {
            let Some(name) = input.file_name().map(Path::new) else {
                return Err(SandboxError {
                    path: input.clone(),
                    error: std::io::Error::other("an input file needs a file name"),
                });
            };
            // Named by the submitter: read as the account, which must be
            // allowed to read it, not as the daemon.
            let mut from = match &self.account {
                Some(a) => as_account(a, || File::open(input)),
                None => File::open(input),
            }
            .map_err(sb_err(input))?;
            let mode = mode_of(&from);
            self.copy_in(&mut from, name, mode)?;
        }
        for (from, name) in spec.input_copies {
            // Named by the submitter: only a plain file name lands in the sandbox.
            if Path::new(name)
                .file_name()
                .filter(|b| *b == name.as_str())
                .is_none()
            {
                return Err(SandboxError {
                    path: PathBuf::from(name),
                    error: std::io::Error::other("an input file's name must be a plain file name"),
                });
            }
            let mut from = File::open(from).map_err(sb_err(from))?;
            let mode = mode_of(&from);
            self.copy_in(&mut from, Path::new(name), mode)?;
        }
        Ok(self.path.join(exe))
    }

    /// The files for the process's standard output and error: those
    /// `chosen` names (opened as the account), else the sandbox's.
    pub(crate) fn output_files(
        &self,
        chosen: &(Option<PathBuf>, Option<PathBuf>),
    ) -> Result<(File, File), SandboxError> {
        let open = |chosen: &Option<PathBuf>, default: &str| -> Result<File, SandboxError> {
            let create = |path: &Path| {
                if let Some(dir) = path.parent() {
                    fs::create_dir_all(dir).map_err(sb_err(dir))?;
                }
                File::create(path).map_err(sb_err(path))
            };
            match (chosen, &self.account) {
                (Some(path), Some(a)) => as_account(a, || create(path)),
                (Some(path), None) => create(path),
                (None, _) => self.new_file(Path::new(default), 0o644),
            }
        };
        Ok((open(&chosen.0, "stdout")?, open(&chosen.1, "stderr")?))
    }

    /// Writes the job's credential into the sandbox, readable by the
    /// process only; its path, for `CARMI_SECRET_FILE`.
    pub(crate) fn credential(
        &self,
        credential: Option<&JobCredential>,
    ) -> Result<Option<PathBuf>, SandboxError> {
        let Some(cred) = credential else {
            return Ok(None);
        };
        let name = carmi_api::jobcred::FILE_NAME;
        let path = self.path.join(name);
        let mut file = self.new_file(Path::new(name), 0o600)?;
        file.write_all(cred.text().as_bytes())
            .map_err(sb_err(&path))?;
        Ok(Some(path))
    }

    /// Gives the directory to the account: the last step, once everything
    /// in it is written.
    pub(crate) fn hand_over(self) -> Result<(), SandboxError> {
        if let Some(a) = &self.account {
            fchown(
                self.dir.as_fd(),
                Some(Uid::from_raw(a.uid)),
                Some(Gid::from_raw(a.gid)),
            )
            .map_err(nix_err(&self.path))?;
        }
        Ok(())
    }
}

/// The permission bits of `file`, as `fs::copy` would carry them over (a
/// script stays executable).
fn mode_of(file: &File) -> u32 {
    file.metadata()
        .map_or(0o644, |m| m.permissions().mode() & 0o777)
}

/// True when `st` is a regular file with no other name: what the daemon
/// made, not a link, a FIFO, a device or a second name of another file.
pub(crate) fn plain_file(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
        && st.st_nlink == 1
}

/// Moves the standard output and error out of the sandbox, into
/// `output_dir` as `<process>.out` and `.err`, and removes the sandbox.
/// What the process left under those names is kept only if it is a regular
/// file of one name (checked once moved, in a directory only root may
/// write): never a link for the daemon to read through later.
pub(crate) fn keep_output(sandbox: &Path, output_dir: &Path, process: ProcessId) {
    let dirs = fs::create_dir_all(output_dir)
        .and_then(|()| Ok((open_dir(sandbox)?, open_dir(output_dir)?)));
    match dirs {
        Err(e) => {
            tracing::warn!(path = %output_dir.display(), error = %e, "cannot keep output files")
        }
        Ok((from_dir, to_dir)) => {
            for (from, ext) in [("stdout", "out"), ("stderr", "err")] {
                let to = format!("{}.{ext}", process.0);
                match renameat(&from_dir, from, &to_dir, to.as_str()) {
                    Ok(()) => {}
                    // A master may have written elsewhere (its submit file's output/error).
                    Err(nix::Error::ENOENT) => continue,
                    Err(e) => {
                        tracing::warn!(from = %sandbox.join(from).display(), to = %output_dir.join(&to).display(), error = %e, "cannot keep output file");
                        continue;
                    }
                }
                let kept = fstatat(&to_dir, to.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW);
                if !kept.as_ref().is_ok_and(plain_file) {
                    tracing::warn!(%process, file = from, "the process left something other than a regular file as its output; not kept");
                    let path = output_dir.join(&to);
                    let is_dir = kept.is_ok_and(|st| {
                        SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
                            == SFlag::S_IFDIR
                    });
                    if is_dir {
                        let _ = fs::remove_dir_all(&path);
                    } else {
                        let _ = unlinkat(&to_dir, to.as_str(), UnlinkatFlags::NoRemoveDir);
                    }
                }
            }
        }
    }
    if let Err(e) = fs::remove_dir_all(sandbox) {
        tracing::warn!(path = %sandbox.display(), error = %e, "cannot remove sandbox");
    }
}

/// A name for the executable inside the sandbox that cannot escape it or
/// clash with the output files.
pub(crate) fn sandbox_file_name(name: &str) -> String {
    let base: String = name
        .rsplit('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match base.as_str() {
        "" | "." | ".." => "program".into(),
        "stdout" | "stderr" => format!("{base}.exe"),
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_is_made_afresh_and_never_written_through_a_link() {
        let tmp = crate::test_dir::TempDir::new("sandbox-afresh");
        let secret = tmp.path().join("secret");
        fs::write(&secret, "the machine's").unwrap();
        let sandboxes = tmp.path().join("sandbox");
        fs::create_dir_all(sandboxes.join("1")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), sandboxes.join("2")).unwrap();
        for taken in ["1", "2"] {
            let e = Sandbox::create(&sandboxes.join(taken), None).err().unwrap();
            assert_eq!(e.error.kind(), std::io::ErrorKind::AlreadyExists, "{taken}");
        }
        let made = Sandbox::create(&sandboxes.join("3"), None).unwrap();
        // A link in place of a file the daemon makes: refused, not followed.
        std::os::unix::fs::symlink(&secret, sandboxes.join("3/stdout")).unwrap();
        let e = made.output_files(&(None, None)).err().unwrap();
        assert_eq!(e.error.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read_to_string(&secret).unwrap(), "the machine's");
        // A name made twice fails rather than overwrite.
        let program = tmp.path().join("prog");
        fs::write(&program, "#!/bin/sh\n").unwrap();
        let twice = [(program.clone(), "prog".to_string())];
        let spec = Contents {
            name: "prog",
            program: &program,
            input_files: &[],
            input_copies: &twice,
        };
        let made = Sandbox::create(&sandboxes.join("4"), None).unwrap();
        assert!(made.fill(&spec).is_err());
    }

    #[test]
    fn only_regular_files_are_kept_as_output() {
        let tmp = crate::test_dir::TempDir::new("sandbox-keep");
        let secret = tmp.path().join("secret");
        fs::write(&secret, "the machine's").unwrap();
        let sandbox = tmp.path().join("sandbox/5");
        fs::create_dir_all(&sandbox).unwrap();
        fs::write(sandbox.join("stdout"), "out\n").unwrap();
        std::os::unix::fs::symlink(&secret, sandbox.join("stderr")).unwrap();
        let output = tmp.path().join("output/1");
        keep_output(&sandbox, &output, ProcessId(5));
        assert_eq!(fs::read_to_string(output.join("5.out")).unwrap(), "out\n");
        assert!(fs::symlink_metadata(output.join("5.err")).is_err());
        assert!(!sandbox.exists());
        assert_eq!(fs::read_to_string(&secret).unwrap(), "the machine's");
        // A second name of a file is not kept either.
        fs::create_dir_all(&sandbox).unwrap();
        fs::hard_link(&secret, sandbox.join("stdout")).unwrap();
        keep_output(&sandbox, &output, ProcessId(6));
        assert!(fs::symlink_metadata(output.join("6.out")).is_err());
        assert_eq!(fs::read_to_string(&secret).unwrap(), "the machine's");
    }
}
