//! Join bundles and the files they install.
//!
//! A bundle (`NAME.join`, mode 0600) is what `carmi pool add-machine` or
//! `add-user` writes for one machine or user, and `carmi join` installs: a
//! TOML file of five keys, documented in `docs/security.md` ("How to"):
//!
//! ```toml
//! kind = "machine"            # or "user"
//! name = "lab-pc-07"          # the machine's name (its token names it), or the user's
//! pool = "manager:9618"       # the global RM
//! secret = "3f9a..."          # the pool secret
//! token = "..."               # the machine's daemon token, or the user's token
//! ```
//!
//! It holds the pool secret and a token: whoever reads it can join the pool
//! as that machine or user, so it travels like a private key (scp) and is
//! deleted once used. The helpers below write each installed file with its
//! mode from the moment it exists, and never replace a different file
//! without `--force`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// Whose bundle.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A pool machine: its local RM's daemon token.
    Machine,
    /// A user: their token for `carmi`.
    User,
}

/// What one machine or user needs to join the pool.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// A machine's or a user's.
    pub kind: Kind,
    /// The machine's name (as its daemon token names it) or the user's.
    pub name: String,
    /// The global RM, `HOST:PORT`.
    pub pool: String,
    /// The pool secret's text.
    pub secret: String,
    /// The token's text (opaque here).
    pub token: String,
}

impl Bundle {
    /// The bundle as its file holds it, a comment saying what to do with it first.
    pub fn to_text(&self) -> anyhow::Result<String> {
        let kind = match self.kind {
            Kind::Machine => "machine",
            Kind::User => "user",
        };
        Ok(format!(
            "# Joins the CARMI pool at {} as the {kind} `{}`: run `carmi join FILE` {}.\n\
             # It holds the pool secret and a token: keep it private (mode 0600), delete it once used.\n{}",
            self.pool,
            self.name,
            match self.kind {
                Kind::Machine => "on that machine (as root for /etc/carmi)",
                Kind::User => "as that user",
            },
            toml::to_string(self)?
        ))
    }

    /// Reads the bundle `path`, which must be its reader's own and readable
    /// by its owner only (it holds a secret).
    pub fn read(path: &Path) -> anyhow::Result<Bundle> {
        let text = carmi_api::files::read_private(path)?;
        let b: Bundle = toml::from_str(&text)
            .with_context(|| format!("{} is not a join bundle", path.display()))?;
        if b.secret.trim().len() < 16 || b.token.trim().is_empty() || b.pool.trim().is_empty() {
            bail!(
                "{}: its pool, secret or token is empty or short",
                path.display()
            );
        }
        Ok(b)
    }
}

/// A file to install: its text and mode.
pub struct Planned {
    /// Where.
    pub path: PathBuf,
    /// What it holds.
    pub text: String,
    /// Its permission bits.
    pub mode: u32,
    /// Made from the file there (a key set, a placeholder filled in), not
    /// in its place: never a conflict.
    pub update: bool,
}

impl Planned {
    /// A file readable by its owner only (a secret, a token).
    pub fn private(path: PathBuf, text: String) -> Planned {
        Planned {
            path,
            text,
            mode: 0o600,
            update: false,
        }
    }

    /// A file anyone may read (a configuration, a certificate).
    pub fn public(path: PathBuf, text: String) -> Planned {
        Planned {
            path,
            text,
            mode: 0o644,
            update: false,
        }
    }

    /// The same, made from the file there: its other contents kept.
    pub fn updating(self) -> Planned {
        Planned {
            update: true,
            ..self
        }
    }

    /// Why it may not be written without `--force`: it exists with other
    /// contents. `None` when it is absent or the same.
    pub fn conflict(&self) -> Option<String> {
        if self.update {
            return None;
        }
        let old = std::fs::read_to_string(&self.path).ok()?;
        (old.trim() != self.text.trim())
            .then(|| format!("{} exists with other contents", self.path.display()))
    }

    /// Writes it (with its mode from the moment it exists, by a rename
    /// over an older file), unless the same is there already; true if written.
    pub fn write(&self) -> anyhow::Result<bool> {
        if let Ok(old) = std::fs::read_to_string(&self.path)
            && old.trim() == self.text.trim()
        {
            // Same contents: only tighten a looser mode.
            let mode = std::fs::metadata(&self.path)?.permissions().mode() & 0o777;
            if mode & !self.mode != 0 {
                std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode))?;
            }
            return Ok(false);
        }
        let mut tmp = self.path.as_os_str().to_os_string();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(self.mode)
                .open(&tmp)?;
            // The mode asked for, whatever the umask.
            f.set_permissions(std::fs::Permissions::from_mode(self.mode))?;
            f.write_all(self.text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("cannot write {}", self.path.display()));
        }
        Ok(true)
    }
}

/// Refuses, naming each, the files of `plan` that exist with other
/// contents, unless `force`.
pub fn check_conflicts(plan: &[Planned], force: bool) -> anyhow::Result<()> {
    let conflicts: Vec<String> = plan.iter().filter_map(Planned::conflict).collect();
    if !conflicts.is_empty() && !force {
        bail!(
            "{}; nothing was written. Pass --force to replace {}",
            conflicts.join("; "),
            if conflicts.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

/// `config.toml` at `path` with `keys` set (string values), the other keys
/// and comments of an existing file kept; `Err` names a key that holds
/// another value, unless `force`.
pub fn config_with(path: &Path, keys: &[(&str, String)], force: bool) -> anyhow::Result<String> {
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&old).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut lines: Vec<String> = Vec::new();
    for (key, value) in keys {
        match table.get(*key) {
            Some(toml::Value::String(v)) if v == value => {}
            Some(other) if !force => bail!(
                "{} sets {key} = {other}, not \"{value}\"; nothing was written. Pass --force to replace it",
                path.display()
            ),
            _ => lines.push(format!("{key} = {}", toml::Value::String(value.clone()))),
        }
    }
    // Top-level keys go before any table: the new ones first, then the old
    // text without the keys replaced.
    let replaced: Vec<&str> = keys
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| lines.iter().any(|n| n.split(' ').next() == Some(*k)))
        .collect();
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    let mut top = true;
    for l in old.lines() {
        top &= !l.trim_start().starts_with('[');
        let key = l.split('=').next().unwrap_or("").trim();
        if !(top && l.contains('=') && replaced.contains(&key)) {
            text.push_str(l);
            text.push('\n');
        }
    }
    Ok(text)
}

/// Creates the pool's directory `dir` if missing: the caller's own, mode
/// 0700 (0750 for root's `/etc/carmi`, whose group the daemons' may be).
pub fn make_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mode = if dir == Path::new(carmi_api::pooldir::SYSTEM_DIR) {
        0o750
    } else {
        0o700
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// The uid and gid of the system account `name`, if there is one.
pub fn system_account(name: &str) -> Option<(u32, u32)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam reads a NUL-terminated name; the result, if not
    // null, points to a static record read at once, before any other call.
    unsafe {
        let pw = libc::getpwnam(c.as_ptr());
        (!pw.is_null()).then(|| ((*pw).pw_uid, (*pw).pw_gid))
    }
}

/// An absolute path's text, for a config file read from anywhere.
pub fn absolute(path: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(path)
        .with_context(|| format!("cannot make {} absolute", path.display()))?;
    abs.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not UTF-8", abs.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_round_trips_and_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let b = Bundle {
            kind: Kind::Machine,
            name: "lab-pc-07".into(),
            pool: "manager:9618".into(),
            secret: "0123456789abcdef0123".into(),
            token: "a.b.c".into(),
        };
        let path = dir.path().join("lab-pc-07.join");
        carmi_api::files::write_private(&path, &b.to_text().unwrap(), false).unwrap();
        assert_eq!(Bundle::read(&path).unwrap(), b);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(format!("{:#}", Bundle::read(&path).unwrap_err()).contains("too open"));
    }

    #[test]
    fn config_keys_are_set_and_a_different_one_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "# mine\nlocal = \"x:1\"\npool = \"old:1\"\n").unwrap();
        let keys = [("pool", "new:1".to_string()), ("token", "/t".to_string())];
        let e = config_with(&path, &keys, false).unwrap_err();
        assert!(e.to_string().contains("pool = \"old:1\""), "{e}");
        let text = config_with(&path, &keys, true).unwrap();
        let t: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(t["pool"].as_str(), Some("new:1"));
        assert_eq!(t["token"].as_str(), Some("/t"));
        assert_eq!(t["local"].as_str(), Some("x:1"));
        assert!(text.contains("# mine"));
        // Setting what is there already changes nothing.
        std::fs::write(&path, &text).unwrap();
        assert_eq!(
            config_with(&path, &keys, false).unwrap().trim(),
            text.trim()
        );
    }
}
