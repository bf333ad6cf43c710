//! `carmi pool ...`: setting up a pool.

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
    /// Which of the pool's managers (CARMI_POOL=a:9618,b:9618) is active,
    /// and how far each standby is behind it (docs/standby.md).
    Status(crate::managers::ManagersArgs),
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
        PoolCommand::Status(args) => crate::managers::run(&args),
        PoolCommand::Up(args) => crate::embedded::up(&args),
        PoolCommand::Down => crate::embedded::down(),
        PoolCommand::Serve(args) => crate::embedded::serve(&args),
    }
}
