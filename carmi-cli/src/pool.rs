//! `carmi pool ...`: setting up a pool.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use carmi_api::handshake::Secret;
use clap::Subcommand;

/// `carmi pool` subcommands.
#[derive(Subcommand)]
pub enum PoolCommand {
    /// Write a fresh random pool secret and, beside it, the pool's signing
    /// key (pool.key) and a first admin token (pool.admin.token), all readable by
    /// their owner only. The key stays on the manager (`carmi-global
    /// --pool-key`); the secret goes to every machine.
    Init {
        /// Where to write it.
        #[arg(
            long,
            env = "CARMI_SECRET",
            default_value = "pool.secret",
            value_name = "FILE"
        )]
        secret: std::path::PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Make each machine's daemon token (admin): writes NAME.token (mode
    /// 0600) per machine and prints the line that starts its local RM.
    AddMachine(crate::join::AddArgs),
    /// Make each user's token (admin; power submit unless --authz): writes
    /// NAME.token (mode 0600) per user.
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
        PoolCommand::Init { secret, force } => {
            pool_init(&secret, force)?;
            let user = std::env::var("USER").unwrap_or_else(|_| "admin".into());
            let id = crate::token::init_keys(&secret, &user, force)?;
            println!(
                "wrote the pool's signing key to {} (keep it on the manager: carmi-global --pool-key) and an admin token ({id}, for `{user}`) to {}",
                secret.with_extension("key").display(),
                secret.with_extension("admin.token").display()
            );
            Ok(())
        }
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
        "wrote a new pool secret to {} (readable by its owner only); copy it to every machine of the pool",
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
