//! `carmi join FILE`: installs a join bundle (`crate::bundle`) into the
//! pool's directory ([`carmi_api::pooldir`]: `/etc/carmi` as root,
//! `~/.config/carmi` otherwise), each file with its mode, and then, for a
//! machine, starts its local RM with them.
//!
//! A machine's bundle installs `pool.secret` and `local.token` (0600),
//! `local.env` (`CARMI_GLOBAL=`, the systemd unit's) and `local.toml` (its
//! name; `--config FILE` puts the owner's policy in); then `carmi join`
//! becomes `carmi-local` with those files (exec), or `--systemd` enables
//! and starts `carmi-local.service`. A user's bundle installs `pool.secret`
//! and `user.token` (0600) and sets `pool`, `secret` and `token` in the
//! directory's `config.toml`, where `carmi` finds them. A different file
//! already there is never replaced without `--force`, and the refusal names it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use carmi_api::pooldir;
use clap::Args;

use crate::bundle::{Bundle, Kind, Planned, check_conflicts, config_with, make_dir};

/// The skeleton's manager address (`deploy/systemd/local.env`): a
/// placeholder `carmi join` replaces without `--force`.
const SKELETON_GLOBAL: &str = "CARMI_GLOBAL=manager.example.org:9618";

/// `carmi join` options.
#[derive(Args)]
pub struct JoinArgs {
    /// The bundle `carmi pool add-machine` or `add-user` wrote (NAME.join).
    bundle: PathBuf,
    /// Install into this directory [default: $CARMI_DIR, else /etc/carmi as
    /// root, else ~/.config/carmi].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// A machine's local RM configuration (slots, owner policy, listen
    /// address) to install as local.toml [default: the one there, else a
    /// minimal one]; its name, if it says one, must be the bundle's.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Replace files that are there with other contents.
    #[arg(long)]
    force: bool,
    /// A machine's: enable and start carmi-local.service (deploy/systemd/,
    /// root, /etc/carmi) instead of running carmi-local here.
    #[arg(long, conflicts_with = "no_start")]
    systemd: bool,
    /// A machine's: install the files only, and print the command that
    /// starts its local RM.
    #[arg(long)]
    no_start: bool,
    /// More carmi-local options, after `--` (e.g. -- --work-dir /scratch/carmi).
    #[arg(last = true, value_name = "CARMI_LOCAL_ARGS")]
    local_args: Vec<String>,
}

/// Runs `carmi join`.
pub fn run(args: &JoinArgs) -> anyhow::Result<()> {
    let bundle = Bundle::read(&args.bundle)?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => pooldir::default_dir_env()
            .context("no pool directory: set $HOME or $CARMI_DIR, or pass --dir DIR")?,
    };
    if bundle.kind == Kind::User && (args.config.is_some() || args.systemd || args.no_start) {
        bail!(
            "{} is a user's bundle (`{}`): --config, --systemd and --no-start are for a machine's",
            args.bundle.display(),
            bundle.name
        );
    }
    if args.systemd && dir != Path::new(pooldir::SYSTEM_DIR) {
        bail!(
            "--systemd starts carmi-local.service, which reads /etc/carmi: run `sudo carmi join {}` (as root, without --dir or $CARMI_DIR)",
            args.bundle.display()
        );
    }
    make_dir(&dir)?;
    let secret = Planned::private(
        dir.join(pooldir::SECRET),
        format!("{}\n", bundle.secret.trim()),
    );
    let mut plan = vec![secret];
    match bundle.kind {
        Kind::Machine => plan.extend(machine_files(&bundle, &dir, args)?),
        Kind::User => plan.extend(user_files(&bundle, &dir, args.force)?),
    }
    check_conflicts(&plan, args.force)?;
    for p in &plan {
        if p.write()? {
            eprintln!("wrote {}", p.path.display());
        }
    }
    match bundle.kind {
        Kind::User => {
            println!(
                "joined the pool at {} as `{}`: carmi finds it in {}",
                bundle.pool,
                bundle.name,
                dir.join(pooldir::CONFIG).display()
            );
            Ok(())
        }
        Kind::Machine => start(&bundle, &dir, args),
    }
}

/// A machine's files: its token, the manager's address and its configuration.
fn machine_files(bundle: &Bundle, dir: &Path, args: &JoinArgs) -> anyhow::Result<Vec<Planned>> {
    let token = Planned::private(
        dir.join(pooldir::LOCAL_TOKEN),
        format!("{}\n", bundle.token.trim()),
    );
    let env_file = dir.join(pooldir::LOCAL_ENV);
    let env_text = format!(
        "# The pool's manager, for carmi-local.service (EnvironmentFile=); written by carmi join.\nCARMI_GLOBAL={}\n",
        bundle.pool
    );
    let mut env = Planned::public(env_file.clone(), env_text);
    let old_env = std::fs::read_to_string(&env_file).unwrap_or_default();
    let same_global = old_env
        .lines()
        .any(|l| l.trim() == format!("CARMI_GLOBAL={}", bundle.pool));
    if same_global || old_env.lines().any(|l| l.trim() == SKELETON_GLOBAL) {
        // The skeleton's placeholder, or the address already there: no conflict.
        let global = format!("CARMI_GLOBAL={}", bundle.pool);
        env.text = old_env.replace(SKELETON_GLOBAL, &global);
        env = env.updating();
    }
    let config_file = dir.join(pooldir::LOCAL_CONFIG);
    let (config, update) = local_config(bundle, &config_file, args.config.as_deref(), args.force)?;
    let mut config = Planned::public(config_file, config);
    if update {
        config = config.updating();
    }
    Ok(vec![token, env, config])
}

/// The local RM's configuration: `given` (or the one at `path`, else a
/// minimal one), with the bundle's machine name; true when made from the
/// one at `path`.
fn local_config(
    bundle: &Bundle,
    path: &Path,
    given: Option<&Path>,
    force: bool,
) -> anyhow::Result<(String, bool)> {
    let update = given.is_none();
    let (source, text) = match given {
        Some(g) => (
            g.to_path_buf(),
            std::fs::read_to_string(g).with_context(|| format!("cannot read {}", g.display()))?,
        ),
        None => match std::fs::read_to_string(path) {
            Ok(t) => (path.to_path_buf(), t),
            Err(_) => {
                return Ok((
                    format!(
                        "# This machine in the pool (carmi-local --config); written by carmi join.\n\
                     # Slots, the owner policy, attributes: `carmi-local --help`, deploy/systemd/local.toml.\n\
                     name = \"{}\"\nlisten = \"0.0.0.0:9620\"\n",
                        bundle.name
                    ),
                    false,
                ));
            }
        },
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", source.display()))?;
    match table.get("name") {
        Some(toml::Value::String(n)) if *n == bundle.name => Ok((text, update)),
        Some(other) if !force || given.is_some() => bail!(
            "{} says name = {other}, but the bundle's token is machine `{}`'s: its local RM would be refused; nothing was written{}",
            source.display(),
            bundle.name,
            if given.is_some() {
                ""
            } else {
                ". Pass --force to set it"
            }
        ),
        _ => {
            // Top-level keys come before any table: the name goes first.
            let kept = text.lines().filter(|l| {
                !(l.split('=').next().is_some_and(|k| k.trim() == "name") && l.contains('='))
            });
            let mut out = format!("name = \"{}\"\n", bundle.name);
            for l in kept {
                out.push_str(l);
                out.push('\n');
            }
            Ok((out, update))
        }
    }
}

/// A user's files: their token, and config.toml naming the pool.
fn user_files(bundle: &Bundle, dir: &Path, force: bool) -> anyhow::Result<Vec<Planned>> {
    let token_file = dir.join(pooldir::USER_TOKEN);
    let config_file = dir.join(pooldir::CONFIG);
    let keys = [
        ("pool", bundle.pool.clone()),
        (
            "secret",
            crate::bundle::absolute(&dir.join(pooldir::SECRET))?,
        ),
        ("token", crate::bundle::absolute(&token_file)?),
    ];
    let config = config_with(&config_file, &keys, force)?;
    Ok(vec![
        Planned::private(token_file, format!("{}\n", bundle.token.trim())),
        Planned::public(config_file, config).updating(),
    ])
}

/// Starts the machine's local RM: exec'd here, by systemd, or only printed.
fn start(bundle: &Bundle, dir: &Path, args: &JoinArgs) -> anyhow::Result<()> {
    if args.systemd {
        let status = std::process::Command::new("systemctl")
            .args(["enable", "--now", "carmi-local.service"])
            .status()
            .context("cannot run systemctl (is this a systemd machine? without --systemd, carmi join runs carmi-local itself)")?;
        if !status.success() {
            bail!(
                "`systemctl enable --now carmi-local.service` failed ({status}); is it installed (sudo deploy/install.sh --systemd)?"
            );
        }
        println!(
            "{} joined the pool at {}: carmi-local.service enabled and started",
            bundle.name, bundle.pool
        );
        return Ok(());
    }
    let local = carmi_local_binary();
    let mut words: Vec<String> = vec![
        "--global".into(),
        bundle.pool.clone(),
        "--secret".into(),
        dir.join(pooldir::SECRET).display().to_string(),
        "--token".into(),
        dir.join(pooldir::LOCAL_TOKEN).display().to_string(),
        "--config".into(),
        dir.join(pooldir::LOCAL_CONFIG).display().to_string(),
    ];
    words.extend(args.local_args.iter().cloned());
    if args.no_start {
        println!("{} {}", local.display(), words.join(" "));
        return Ok(());
    }
    eprintln!(
        "{} joins the pool at {}: running {} {}",
        bundle.name,
        bundle.pool,
        local.display(),
        words.join(" ")
    );
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(&local).args(&words).exec();
    Err(e).with_context(|| format!("cannot run {}", local.display()))
}

/// `carmi-local` beside this `carmi`, else the one on the PATH.
fn carmi_local_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|me| me.parent().map(|d| d.join("carmi-local")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("carmi-local"))
}
