//! A process's sandbox: its directory, the private copy of its executable,
//! its input files, its job credential and its output files, made before
//! the start. With a slot user ([`crate::isolation`]) the sandbox and all in
//! it belong to that account, mode 0700 (the executable too, so that the
//! account can run it), and the paths a submitter names are opened as the
//! account, never as the daemon.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use carmi_api::jobcred::JobCredential;

use crate::isolation::{Account, as_account, give};

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

/// Makes the sandbox afresh, with the executable and input files in it;
/// returns the executable's path there.
pub(crate) fn prepare(
    spec: &Contents<'_>,
    sandbox: &Path,
    account: Option<&Account>,
) -> Result<PathBuf, SandboxError> {
    // Everything made here goes to the account, if any.
    let own = |path: &Path| match account {
        Some(a) => give(path, a).map_err(sb_err(path)),
        None => Ok(()),
    };
    if sandbox.exists() {
        fs::remove_dir_all(sandbox).map_err(sb_err(sandbox))?;
    }
    fs::create_dir_all(sandbox).map_err(sb_err(sandbox))?;
    if account.is_some() {
        fs::set_permissions(sandbox, fs::Permissions::from_mode(0o700)).map_err(sb_err(sandbox))?;
        own(sandbox)?;
    }
    let exe = sandbox.join(sandbox_file_name(spec.name));
    // A private copy rather than a hard link: a process that rewrote its
    // own file would otherwise corrupt the cache for every later job.
    fs::copy(spec.program, &exe).map_err(sb_err(&exe))?;
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o700)).map_err(sb_err(&exe))?;
    own(&exe)?;
    for input in spec.input_files {
        let Some(name) = input.file_name() else {
            return Err(SandboxError {
                path: input.clone(),
                error: std::io::Error::other("an input file needs a file name"),
            });
        };
        let to = sandbox.join(name);
        // Named by the submitter: read as the account, which must be
        // allowed to read it, not as the daemon.
        let mut from = match account {
            Some(a) => as_account(a, || File::open(input)),
            None => File::open(input),
        }
        .map_err(sb_err(input))?;
        let mut file = File::create(&to).map_err(sb_err(&to))?;
        std::io::copy(&mut from, &mut file).map_err(sb_err(input))?;
        // As `fs::copy` would: a script stays executable.
        let mode = from
            .metadata()
            .map_or(0o644, |m| m.permissions().mode() & 0o777);
        fs::set_permissions(&to, fs::Permissions::from_mode(mode)).map_err(sb_err(&to))?;
        own(&to)?;
    }
    for (from, name) in spec.input_copies {
        // Named by the submitter: only a plain file name lands in the sandbox.
        let Some(base) = Path::new(name).file_name().filter(|b| *b == name.as_str()) else {
            return Err(SandboxError {
                path: PathBuf::from(name),
                error: std::io::Error::other("an input file's name must be a plain file name"),
            });
        };
        let to = sandbox.join(base);
        fs::copy(from, &to).map_err(sb_err(from))?;
        own(&to)?;
    }
    Ok(exe)
}

/// The files for the process's standard output and error: those `chosen`
/// names (opened as the account), else the sandbox's.
pub(crate) fn output_files(
    chosen: &(Option<PathBuf>, Option<PathBuf>),
    sandbox: &Path,
    account: Option<&Account>,
) -> Result<(File, File), SandboxError> {
    let open = |chosen: &Option<PathBuf>, default: &str| -> Result<File, SandboxError> {
        let create = |path: &Path| {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(sb_err(dir))?;
            }
            File::create(path).map_err(sb_err(path))
        };
        match (chosen, account) {
            (Some(path), Some(a)) => as_account(a, || create(path)),
            (Some(path), None) => create(path),
            (None, _) => {
                let path = sandbox.join(default);
                let file = create(&path)?;
                if let Some(a) = account {
                    give(&path, a).map_err(sb_err(&path))?;
                }
                Ok(file)
            }
        }
    };
    Ok((open(&chosen.0, "stdout")?, open(&chosen.1, "stderr")?))
}

/// Writes the job's credential into the sandbox, readable by the process
/// only; its path, for `CARMI_SECRET_FILE`.
pub(crate) fn credential(
    credential: Option<&JobCredential>,
    sandbox: &Path,
    account: Option<&Account>,
) -> Result<Option<PathBuf>, SandboxError> {
    let Some(cred) = credential else {
        return Ok(None);
    };
    let path = sandbox.join(carmi_api::jobcred::FILE_NAME);
    carmi_api::jobcred::write_file(&path, cred).map_err(|e| SandboxError {
        path: path.clone(),
        error: std::io::Error::other(e.to_string()),
    })?;
    if let Some(a) = account {
        give(&path, a).map_err(sb_err(&path))?;
    }
    Ok(Some(path))
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
