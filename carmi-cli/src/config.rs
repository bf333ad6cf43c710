//! Where the pool is: the coordinates every subcommand that talks to the
//! pool needs, resolved in one order so that `carmi pool up` (which writes the
//! config file) and the job commands agree.
//!
//! Order, first found wins, per key: command-line flags (`--pool`,
//! `--secret`, `--local`), then environment variables (`CARMI_POOL`,
//! `CARMI_SECRET`, `CARMI_LOCAL`), then the TOML file `$CARMI_CONFIG`, else
//! `$XDG_CONFIG_HOME/carmi/config.toml`, else `$HOME/.config/carmi/config.toml`,
//! with keys `pool = "HOST:PORT"`, `secret = "/abs/path"`, `local =
//! "HOST:PORT"`, `pool_pid = N`. Unknown keys are ignored.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;

/// Pool coordinates from the command line (each also read from the environment by the resolver).
#[derive(Args, Clone, Debug, Default)]
pub struct PoolArgs {
    /// The global RM, HOST:PORT [env: CARMI_POOL]
    #[arg(long, value_name = "HOST:PORT")]
    pub pool: Option<String>,
    /// The pool's secret file [env: CARMI_SECRET]
    #[arg(long, value_name = "FILE")]
    pub secret: Option<PathBuf>,
    /// This machine's local RM, HOST:PORT [env: CARMI_LOCAL]
    #[arg(long, value_name = "HOST:PORT")]
    pub local: Option<String>,
}

/// The config file's keys.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ConfigFile {
    /// `host:port` of the global RM.
    pub pool: Option<String>,
    /// Path of the secret file.
    pub secret: Option<PathBuf>,
    /// `host:port` of the local RM.
    pub local: Option<String>,
    /// Process id of a pool started by `carmi pool up`.
    pub pool_pid: Option<u32>,
}

/// Resolved coordinates; each `None` when no source gives it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Coordinates {
    /// `host:port` of the global RM.
    pub pool: Option<String>,
    /// Path of the secret file.
    pub secret: Option<PathBuf>,
    /// `host:port` of the local RM.
    pub local: Option<String>,
    /// Process id of a pool started by `carmi pool up`.
    pub pool_pid: Option<u32>,
}

impl Coordinates {
    /// The global RM's address, or an error saying where to give it.
    pub fn pool(&self) -> anyhow::Result<&str> {
        match &self.pool {
            Some(p) => Ok(p),
            None => bail!(
                "no pool address: pass --pool HOST:PORT, set CARMI_POOL, or put pool = \"HOST:PORT\" in {}",
                config_path_hint()
            ),
        }
    }

    /// The secret file, or an error saying where to give it.
    pub fn secret(&self) -> anyhow::Result<&Path> {
        match &self.secret {
            Some(p) => Ok(p),
            None => bail!(
                "no pool secret: pass --secret FILE, set CARMI_SECRET, or put secret = \"/abs/path\" in {}",
                config_path_hint()
            ),
        }
    }
}

/// The config file to read, from `lookup` (the environment, injectable for tests).
pub fn config_path(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let nonempty = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(p) = nonempty("CARMI_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = nonempty("XDG_CONFIG_HOME") {
        return Some(Path::new(&x).join("carmi/config.toml"));
    }
    nonempty("HOME").map(|h| Path::new(&h).join(".config/carmi/config.toml"))
}

fn config_path_hint() -> String {
    config_path(&|k| std::env::var(k).ok())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the config file ($CARMI_CONFIG)".into())
}

/// Reads a config file; a missing file is an empty config, a broken one an error.
pub fn read_config(path: &Path) -> anyhow::Result<ConfigFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text)
            .with_context(|| format!("config file {} is not valid", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read config file {}", path.display())),
    }
}

/// Flags > environment > config file, key by key.
pub fn resolve(
    flags: &PoolArgs,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Coordinates> {
    let file = match config_path(lookup) {
        Some(p) => read_config(&p)?,
        None => ConfigFile::default(),
    };
    let env = |k: &str| lookup(k).filter(|v| !v.is_empty());
    Ok(Coordinates {
        pool: flags
            .pool
            .clone()
            .or_else(|| env("CARMI_POOL"))
            .or(file.pool),
        secret: flags
            .secret
            .clone()
            .or_else(|| env("CARMI_SECRET").map(PathBuf::from))
            .or(file.secret),
        local: flags
            .local
            .clone()
            .or_else(|| env("CARMI_LOCAL"))
            .or(file.local),
        pool_pid: file.pool_pid,
    })
}

/// [`resolve`] against the process environment.
pub fn resolve_env(flags: &PoolArgs) -> anyhow::Result<Coordinates> {
    resolve(flags, &|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn flags_beat_environment_beat_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "pool = \"f:1\"\nsecret = \"/f/secret\"\nlocal = \"f:2\"\npool_pid = 42\nfuture_key = 1\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let lookup = env(&[("CARMI_CONFIG", path), ("CARMI_POOL", "e:1")]);
        let flags = PoolArgs {
            local: Some("x:9".into()),
            ..PoolArgs::default()
        };
        let c = resolve(&flags, &lookup).unwrap();
        assert_eq!(c.pool.as_deref(), Some("e:1"));
        assert_eq!(c.secret.as_deref(), Some(Path::new("/f/secret")));
        assert_eq!(c.local.as_deref(), Some("x:9"));
        assert_eq!(c.pool_pid, Some(42));
    }

    #[test]
    fn config_file_locations_in_order() {
        let p = |pairs: &[(&str, &str)]| config_path(&env(pairs));
        assert_eq!(
            p(&[("HOME", "/h")]),
            Some("/h/.config/carmi/config.toml".into())
        );
        assert_eq!(
            p(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")]),
            Some("/x/carmi/config.toml".into())
        );
        assert_eq!(
            p(&[
                ("HOME", "/h"),
                ("XDG_CONFIG_HOME", "/x"),
                ("CARMI_CONFIG", "/c.toml")
            ]),
            Some("/c.toml".into())
        );
        assert_eq!(p(&[]), None);
    }

    #[test]
    fn missing_file_is_empty_and_broken_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let c = resolve(
            &PoolArgs::default(),
            &env(&[("CARMI_CONFIG", missing.to_str().unwrap())]),
        )
        .unwrap();
        assert_eq!(c, Coordinates::default());
        assert!(c.pool().unwrap_err().to_string().contains("--pool"));
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "pool = [").unwrap();
        let e = resolve(
            &PoolArgs::default(),
            &env(&[("CARMI_CONFIG", bad.to_str().unwrap())]),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("is not valid"), "{e:#}");
    }
}
