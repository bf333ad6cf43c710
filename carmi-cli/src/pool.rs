//! `carmi pool ...`: setting up a pool.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use carmi_api::handshake::Secret;
use clap::Subcommand;

/// `carmi pool` subcommands.
#[derive(Subcommand)]
pub enum PoolCommand {
    /// Make the pool's files on the manager, in the pool's directory
    /// (/etc/carmi as root, ~/.config/carmi otherwise, or --dir): the pool
    /// secret, the signing key (pool.key), a first admin token
    /// (pool.admin.token), the dashboard's certificate (dashboard.crt,
    /// dashboard.key) and config.toml, which carmi-global and carmi read
    /// there. Keys, secret and token are readable by their owner only.
    Init(crate::init::InitArgs),
    /// Make each machine's daemon token (admin): writes NAME.join (mode
    /// 0600: the pool's address, its secret, the token) per machine and
    /// prints the one line to run there, `carmi join NAME.join`.
    AddMachine(crate::join::AddArgs),
    /// Make each user's token (admin; power submit unless --authz): writes
    /// NAME.join (mode 0600) per user, which `carmi join NAME.join` installs.
    AddUser(crate::join::AddArgs),
    /// Start an embedded pool on this machine in the background and record it.
    Up(crate::embedded::UpArgs),
    /// Stop the pool `carmi pool up` started and remove what it left.
    Down,
    /// Run an embedded pool in the foreground (what `up` starts).
    #[command(hide = true)]
    Serve(crate::embedded::ServeArgs),
}

/// Runs a `carmi pool` subcommand.
pub fn run(command: PoolCommand) -> anyhow::Result<()> {
    match command {
        PoolCommand::Init(args) => crate::init::run(&args),
        PoolCommand::AddMachine(args) => crate::join::add_machines(&args),
        PoolCommand::AddUser(args) => crate::join::add_users(&args),
        PoolCommand::Up(args) => crate::embedded::up(&args),
        PoolCommand::Down => crate::embedded::down(),
        PoolCommand::Serve(args) => crate::embedded::serve(&args),
    }
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
