//! Where the pool is: one order of sources for every tool and every program,
//! so that `carmi`, a WoDi master started by hand and the examples find the
//! same pool the same way.
//!
//! Per key, the first source that gives it wins:
//! 1. what the caller was given (command-line flags);
//! 2. the environment: `CARMI_POOL` (the global RM), `CARMI_SECRET` (the
//!    secret file; `CARMI_SECRET_FILE`, which a local RM sets for the
//!    processes it starts, is read too), `CARMI_LOCAL` (this machine's local
//!    RM), `CARMI_TOKEN` (the file holding the user's token);
//! 3. the embedded pool `carmi pool up` started on this machine, while it
//!    runs: its record `$XDG_STATE_HOME/carmi/pool-up.toml` (else
//!    `$HOME/.local/state/carmi/pool-up.toml`) — a file of its own, so that
//!    `pool up`/`pool down` never touch what the user wrote;
//! 4. the user's file `$CARMI_CONFIG`, else `$XDG_CONFIG_HOME/carmi/config.toml`,
//!    else `$HOME/.config/carmi/config.toml`, with keys `pool = "HOST:PORT"`,
//!    `secret = "/abs/path"`, `local = "HOST:PORT"`. Unknown keys are ignored;
//! 5. unless `$CARMI_CONFIG` names the one file to read, the pool's directory's
//!    `config.toml` ([`crate::pooldir`]: `/etc/carmi/config.toml` for root,
//!    `$CARMI_DIR/config.toml` when set), which `carmi pool init` and `carmi
//!    join` write, so that `carmi` on the manager or after a join needs no
//!    export. For anyone but root it is the user's file of 4 already.
//!
//! The embedded pool comes before the user's file because starting one is
//! the later, explicit choice; once it is down (or its process is gone) its
//! record no longer counts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Environment variable: `host:port` of the global RM.
pub const ENV_POOL: &str = "CARMI_POOL";
/// Environment variable: path of the pool's secret file.
pub const ENV_SECRET: &str = "CARMI_SECRET";
/// Environment variable: path of the file holding the user's token.
pub const ENV_TOKEN: &str = "CARMI_TOKEN";
/// Environment variable: `host:port` of the local RM.
pub const ENV_LOCAL: &str = "CARMI_LOCAL";
/// Environment variable: path of the pool secret file.
pub const ENV_SECRET_FILE: &str = "CARMI_SECRET_FILE";

/// The keys of the user's config file and of the embedded pool's record.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct FileKeys {
    /// `host:port` of the global RM.
    pub pool: Option<String>,
    /// Path of the secret file.
    pub secret: Option<PathBuf>,
    /// `host:port` of the local RM.
    pub local: Option<String>,
    /// Process id of the embedded pool (its record only).
    pub pool_pid: Option<u32>,
    /// Path of the file holding the user's token.
    pub token: Option<PathBuf>,
}

/// The pool's coordinates; each `None` when no source gives it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Coordinates {
    /// `host:port` of the global RM.
    pub pool: Option<String>,
    /// Path of the secret file.
    pub secret: Option<PathBuf>,
    /// `host:port` of the local RM.
    pub local: Option<String>,
    /// Process id of the embedded pool, when the coordinates came from it.
    pub pool_pid: Option<u32>,
    /// Path of the file holding the user's token (what the global RM lets
    /// this user do; none for a pool without tokens).
    pub token: Option<PathBuf>,
}

/// A config file or record that exists but cannot be read or parsed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// The user's config file, from `lookup` (the environment, injectable for tests).
pub fn config_path(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(p) = get("CARMI_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = get("XDG_CONFIG_HOME") {
        return Some(Path::new(&x).join("carmi/config.toml"));
    }
    get("HOME").map(|h| Path::new(&h).join(".config/carmi/config.toml"))
}

/// The pool's directory's `config.toml`, unless `$CARMI_CONFIG` names the
/// one config file to read.
pub fn pool_dir_config(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if lookup("CARMI_CONFIG").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    crate::pooldir::default_dir(lookup).map(|d| d.join(crate::pooldir::CONFIG))
}

/// Where `carmi pool up` records the embedded pool it started.
pub fn record_path(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(x) = get("XDG_STATE_HOME") {
        return Some(Path::new(&x).join("carmi/pool-up.toml"));
    }
    get("HOME").map(|h| Path::new(&h).join(".local/state/carmi/pool-up.toml"))
}

/// Reads a config file or record; a missing file has no keys.
pub fn read_keys(path: &Path) -> Result<FileKeys, FileError> {
    let error = |reason: String| FileError {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| error(format!("not valid TOML: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileKeys::default()),
        Err(e) => Err(error(format!("cannot read: {e}"))),
    }
}

/// The embedded pool's record, if one is there and its process still runs.
pub fn running_embedded_pool(
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<FileKeys>, FileError> {
    let Some(path) = record_path(lookup) else {
        return Ok(None);
    };
    let keys = read_keys(&path)?;
    let alive = keys
        .pool_pid
        .is_some_and(|pid| Path::new("/proc").join(pid.to_string()).exists());
    Ok(alive.then_some(keys))
}

/// Flags, then environment, then the running embedded pool, then the user's
/// file, key by key.
pub fn resolve(
    given: &Coordinates,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Coordinates, FileError> {
    let env = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
    let embedded = running_embedded_pool(lookup)?.unwrap_or_default();
    let user_file = config_path(lookup);
    let file = match &user_file {
        Some(p) => read_keys(p)?,
        None => FileKeys::default(),
    };
    let dir = match pool_dir_config(lookup) {
        Some(p) if Some(&p) != user_file.as_ref() => read_keys(&p)?,
        _ => FileKeys::default(),
    };
    Ok(Coordinates {
        pool: (given.pool.clone())
            .or_else(|| env(ENV_POOL))
            .or(embedded.pool)
            .or(file.pool)
            .or(dir.pool),
        secret: (given.secret.clone())
            .or_else(|| env(ENV_SECRET).map(PathBuf::from))
            .or_else(|| env(ENV_SECRET_FILE).map(PathBuf::from))
            .or(embedded.secret)
            .or(file.secret)
            .or(dir.secret),
        local: (given.local.clone())
            .or_else(|| env(ENV_LOCAL))
            .or(embedded.local)
            .or(file.local)
            .or(dir.local),
        pool_pid: embedded.pool_pid,
        token: (given.token.clone())
            .or_else(|| env(ENV_TOKEN).map(PathBuf::from))
            .or(embedded.token)
            .or(file.token)
            .or(dir.token),
    })
}

/// How to name a missing key, for error messages: every place it may come from.
pub fn where_to_give(key: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let file = config_path(lookup)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the config file ($CARMI_CONFIG)".into());
    let (flag, var, example) = match key {
        "pool" => ("--pool HOST:PORT", ENV_POOL, "pool = \"HOST:PORT\""),
        "secret" => ("--secret FILE", ENV_SECRET, "secret = \"/abs/path\""),
        _ => ("--local HOST:PORT", ENV_LOCAL, "local = \"HOST:PORT\""),
    };
    format!(
        "pass {flag}, set {var}, put {example} in {file}, or join a pool with `carmi join FILE` (a file `carmi pool add-user` wrote), or start one on this machine with `carmi pool up`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn flags_beat_environment_beat_embedded_pool_beat_the_users_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            "pool = \"file:1\"\nsecret = \"/file\"\nlocal = \"file:3\"\neditor = \"vi\"\n",
        )
        .unwrap();
        let state = dir.path().join("state");
        let vars = vec![
            ("CARMI_CONFIG", config.display().to_string()),
            ("XDG_STATE_HOME", state.display().to_string()),
        ];
        let c = resolve(&Coordinates::default(), &env(&vars)).unwrap();
        assert_eq!(c.pool.as_deref(), Some("file:1"));
        assert_eq!(c.local.as_deref(), Some("file:3"));

        // A running embedded pool (this test's own process stands in for it).
        std::fs::create_dir_all(state.join("carmi")).unwrap();
        let record = format!(
            "pool = \"up:1\"\nsecret = \"/up\"\nlocal = \"up:3\"\npool_pid = {}\n",
            std::process::id()
        );
        std::fs::write(state.join("carmi/pool-up.toml"), record).unwrap();
        let c = resolve(&Coordinates::default(), &env(&vars)).unwrap();
        assert_eq!(c.pool.as_deref(), Some("up:1"));
        assert_eq!(c.secret.as_deref(), Some(Path::new("/up")));
        assert_eq!(c.pool_pid, Some(std::process::id()));

        let mut more = vars.clone();
        more.push(("CARMI_POOL", "env:1".into()));
        more.push(("CARMI_SECRET_FILE", "/env".into()));
        let given = Coordinates {
            local: Some("flag:3".into()),
            ..Coordinates::default()
        };
        let c = resolve(&given, &env(&more)).unwrap();
        assert_eq!(c.pool.as_deref(), Some("env:1"));
        assert_eq!(c.secret.as_deref(), Some(Path::new("/env")));
        assert_eq!(c.local.as_deref(), Some("flag:3"));
    }

    #[test]
    fn a_dead_embedded_pools_record_no_longer_counts() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(state.join("carmi")).unwrap();
        // Beyond the kernel's largest pid, so never alive.
        std::fs::write(
            state.join("carmi/pool-up.toml"),
            "pool = \"up:1\"\npool_pid = 2147483647\n",
        )
        .unwrap();
        let vars = vec![
            ("XDG_STATE_HOME", state.display().to_string()),
            (
                "CARMI_CONFIG",
                dir.path().join("none.toml").display().to_string(),
            ),
        ];
        let c = resolve(&Coordinates::default(), &env(&vars)).unwrap();
        assert_eq!(c, Coordinates::default());
    }

    #[test]
    fn the_pool_dirs_config_comes_after_the_users_file() {
        let dir = tempfile::tempdir().unwrap();
        let pool_dir = dir.path().join("etc-carmi");
        std::fs::create_dir_all(&pool_dir).unwrap();
        std::fs::write(
            pool_dir.join("config.toml"),
            "pool = \"dir:1\"\nsecret = \"/dir/pool.secret\"\ntoken = \"/dir/t\"\n",
        )
        .unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config/carmi")).unwrap();
        std::fs::write(
            home.join(".config/carmi/config.toml"),
            "pool = \"user:1\"\n",
        )
        .unwrap();
        let vars = vec![
            ("CARMI_DIR", pool_dir.display().to_string()),
            ("HOME", home.display().to_string()),
            (
                "XDG_STATE_HOME",
                dir.path().join("state").display().to_string(),
            ),
        ];
        let c = resolve(&Coordinates::default(), &env(&vars)).unwrap();
        assert_eq!(c.pool.as_deref(), Some("user:1"));
        assert_eq!(c.secret.as_deref(), Some(Path::new("/dir/pool.secret")));
        assert_eq!(c.token.as_deref(), Some(Path::new("/dir/t")));
        // $CARMI_CONFIG names the one file: the pool's directory is not read.
        let mut only = vars.clone();
        only.push((
            "CARMI_CONFIG",
            dir.path().join("none.toml").display().to_string(),
        ));
        let c = resolve(&Coordinates::default(), &env(&only)).unwrap();
        assert_eq!(c, Coordinates::default());
    }

    #[test]
    fn a_broken_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "pool = ").unwrap();
        let vars = vec![("CARMI_CONFIG", config.display().to_string())];
        let e = resolve(&Coordinates::default(), &env(&vars)).unwrap_err();
        assert!(
            e.to_string().starts_with(&config.display().to_string()),
            "{e}"
        );
        assert!(e.to_string().contains("not valid TOML"), "{e}");
    }
}
