//! `carmi pool init`: the pool's files, made once on the manager in the
//! pool's directory ([`carmi_api::pooldir`]): the secret, the signing key,
//! a first admin token, the dashboard's certificate, and `config.toml`
//! naming the pool's address, the secret and the admin token, so that
//! `carmi-global` and `carmi` on the manager need no flag and no export.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use carmi_api::handshake::Secret;
use carmi_api::pooldir;
use clap::Args;

use crate::bundle::{Planned, check_conflicts, config_with, make_dir, system_account};

/// The global RM's port when `--pool` names none.
pub const DEFAULT_PORT: u16 = 9618;

/// `carmi pool init` options.
#[derive(Args)]
pub struct InitArgs {
    /// The directory of the pool's files [default: $CARMI_DIR, else
    /// /etc/carmi as root, else ~/.config/carmi].
    #[arg(long, value_name = "DIR", conflicts_with = "secret")]
    dir: Option<PathBuf>,
    /// Write the secret to this file instead, the key and admin token beside
    /// it (FILE's name with .key and .admin.token), the dashboard's
    /// certificate in its directory, and no config.toml (for scripts).
    #[arg(long, env = "CARMI_SECRET", value_name = "FILE")]
    secret: Option<PathBuf>,
    /// Where machines and users reach the global RM, HOST:PORT, written into
    /// config.toml and so into every join bundle [default: this host's
    /// name, port 9618].
    #[arg(long, value_name = "HOST:PORT")]
    pool: Option<String>,
    /// Another name the dashboard is reached by (its certificate names
    /// `localhost` and this host's name); repeatable.
    #[arg(long = "dashboard-name", value_name = "NAME")]
    dashboard_names: Vec<String>,
    /// Replace existing files (every machine and user then needs the new
    /// secret, and every token stops working).
    #[arg(long)]
    force: bool,
}

/// This host's name (`uname -n`), without its domain; `localhost` if unknown.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let name = name.trim();
    if name.is_empty() {
        "localhost".into()
    } else {
        name.to_string()
    }
}

/// Runs `carmi pool init`.
pub fn run(args: &InitArgs) -> anyhow::Result<()> {
    let (dir, secret, with_config) = match (&args.secret, &args.dir) {
        (Some(s), _) => {
            let parent = s.parent().filter(|p| !p.as_os_str().is_empty());
            (
                parent.unwrap_or(Path::new(".")).to_path_buf(),
                s.clone(),
                false,
            )
        }
        (None, Some(d)) => (d.clone(), d.join(pooldir::SECRET), true),
        (None, None) => {
            let d = pooldir::default_dir_env()
                .context("no pool directory: set $HOME or $CARMI_DIR, or pass --dir DIR")?;
            (d.clone(), d.join(pooldir::SECRET), true)
        }
    };
    make_dir(&dir)?;
    let key = secret.with_extension("key");
    let admin = secret.with_extension("admin.token");
    let (cert_file, cert_key) = (
        dir.join(pooldir::DASHBOARD_CERT),
        dir.join(pooldir::DASHBOARD_KEY),
    );
    let pool = args
        .pool
        .clone()
        .unwrap_or_else(|| format!("{}:{DEFAULT_PORT}", host_name()));
    if !args.force {
        let taken: Vec<String> = [&secret, &key, &admin, &cert_file, &cert_key]
            .iter()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !taken.is_empty() {
            bail!(
                "already exists: {}; nothing was written. Pass --force to replace {} (every machine and user of the pool then needs the new secret and new tokens)",
                taken.join(", "),
                if taken.len() == 1 { "it" } else { "them" }
            );
        }
    }
    let config_file = dir.join(pooldir::CONFIG);
    let config = if with_config {
        let keys = [
            ("pool", pool.clone()),
            ("secret", crate::bundle::absolute(&secret)?),
            ("token", crate::bundle::absolute(&admin)?),
        ];
        Some(config_with(&config_file, &keys, args.force)?)
    } else {
        None
    };
    pool_init(&secret, args.force)?;
    let user = std::env::var("USER").unwrap_or_else(|_| "admin".into());
    let id = crate::token::init_keys(&secret, &user, args.force)?;
    println!(
        "wrote the pool's signing key to {} (it stays on the manager) and an admin token ({id}, for `{user}`) to {}",
        key.display(),
        admin.display()
    );
    let mut names = vec!["localhost".to_string(), host_name()];
    names.extend(args.dashboard_names.iter().cloned());
    names.dedup();
    let made = carmi_api::webcert::make(names.clone()).map_err(anyhow::Error::msg)?;
    let plan = [
        Planned::public(cert_file.clone(), made.cert_pem),
        Planned::private(cert_key.clone(), made.key_pem),
    ];
    check_conflicts(&plan, args.force)?;
    for p in &plan {
        p.write()?;
    }
    println!(
        "wrote the dashboard's certificate to {} for {} (SHA-256 {}); `carmi-global --http` serves it",
        cert_file.display(),
        names.join(", "),
        made.fingerprint
    );
    if let Some(text) = config {
        Planned::public(config_file.clone(), text).write()?;
        println!(
            "wrote {} (pool = \"{pool}\", the secret and the admin token): `carmi` here needs no export",
            config_file.display()
        );
    }
    if dir == Path::new(pooldir::SYSTEM_DIR) {
        give_to_the_daemon(&secret, &[&key, &cert_key])?;
    }
    println!(
        "next: carmi-global --listen 0.0.0.0:{DEFAULT_PORT} (it finds these files), then carmi pool add-machine NAME... and carmi pool add-user NAME..."
    );
    Ok(())
}

/// In `/etc/carmi`, with a system account `carmi` (the one `deploy/install.sh
/// --systemd` makes, which `carmi-global.service` runs as): the key files
/// become its own, the secret readable by its group (0640), so that the
/// unit starts with nothing more done by hand.
fn give_to_the_daemon(secret: &Path, keys: &[&Path]) -> anyhow::Result<()> {
    let Some((uid, gid)) = system_account("carmi") else {
        return Ok(());
    };
    for k in keys {
        std::os::unix::fs::chown(k, Some(uid), Some(gid))
            .with_context(|| format!("cannot give {} to the user carmi", k.display()))?;
    }
    std::os::unix::fs::chown(secret, Some(0), Some(gid))
        .with_context(|| format!("cannot give {} to the group carmi", secret.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(secret, std::fs::Permissions::from_mode(0o640))?;
    println!(
        "gave {} to the user carmi, and {} to its group (0640), for carmi-global.service",
        keys.iter()
            .map(|k| k.display().to_string())
            .collect::<Vec<_>>()
            .join(" and "),
        secret.display()
    );
    Ok(())
}

/// Writes a fresh pool secret to `path`.
pub fn pool_init(path: &Path, force: bool) -> anyhow::Result<()> {
    let text = format!("{}\n", Secret::generate_text());
    if force {
        // Write beside it and rename over it: the file is never seen half
        // written, and an old file's looser mode does not carry over.
        let name = path
            .file_name()
            .with_context(|| format!("{} is not a file name", path.display()))?;
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let replaced = write_owner_only(&tmp, &text).and_then(|()| {
            std::fs::rename(&tmp, path)
                .with_context(|| format!("cannot replace {}", path.display()))
        });
        if replaced.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        replaced?;
    } else {
        write_owner_only(path, &text).map_err(|e| {
            match e.downcast_ref::<std::io::Error>().map(|e| e.kind()) {
                Some(std::io::ErrorKind::AlreadyExists) => anyhow::anyhow!(
                    "{} already exists; pass --force to replace it (every machine of the pool must then get the new secret)",
                    path.display()
                ),
                _ => e,
            }
        })?;
    }
    println!(
        "wrote a new pool secret to {} (readable by its owner only); the join bundles of `carmi pool add-machine` and `add-user` carry it",
        path.display()
    );
    Ok(())
}

/// Creates `path` (which must not exist) with mode 0600 and writes `text`.
fn write_owner_only(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Set at creation, so the secret is never readable by others, not even briefly.
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
