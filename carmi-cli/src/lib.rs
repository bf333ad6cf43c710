//! `carmi`: the command users and administrators run against a pool.
//!
//! A library as well as the `carmi` binary (`main.rs`, which only calls
//! [`run`]), so that a program can carry the whole command inside itself:
//! the Python package `wodi` links it into its extension module and runs
//! `python -m wodi._carmi pool up` where no `carmi` is installed.
//!
//! # Layout
//! - `lib`: the command line (clap) and dispatch ([`run`]).
//! - `config`: where the pool is (flags > environment > config file).
//! - `pool`: the `carmi pool` subcommands; `init`: `carmi pool init` (the pool's directory).
//! - `join`: `carmi pool add-machine`/`add-user` (join bundles); `join_here`: `carmi join FILE`;
//!   `bundle`: the bundle's format and the files it installs.
//! - `embedded`: `carmi pool up`/`down`: an embedded pool in a background process.
//! - `embedded::supervise`: the background `carmi pool serve`, which restarts the pool's process when it dies.
//! - `status`: `carmi status` (table, `-l`, `-constraint`, summary by arch and state).
//! - `jobs`: `carmi q` (`-analyze`), `carmi rm`; `submit`: `carmi submit`.
//! - `history`: `carmi history`: jobs that left the queue and how they ended.
//! - `shell`: `carmi completions`, `carmi man`.
//! - `wait`: `carmi wait JOB`, exiting with the job's exit status.
//! - `hold`: `carmi hold` / `carmi release`.
//! - `events`: `carmi events JOB [-f]`, and the submit file's `log =` written from them.
//! - `fetch`: `carmi fetch JOB`: the files a job's master sent back, into the submit directory.
//! - `alloc`: `carmi alloc`: allocation queues growing the pool with pilots from Slurm.

mod act;
mod alloc;
mod bundle;
mod config;
mod dryrun;
mod embedded;
mod events;
mod fetch;
mod history;
mod hold;
mod init;
mod jobs;
mod join;
mod join_here;
mod logs;
mod managers;
mod pool;
mod progress;
mod select;
mod shell;
mod ssh_to_job;
mod status;
mod submit;
mod talk;
mod token;
mod userprio;
mod users;
mod wait;

use std::ffi::OsString;

use anyhow::Context;
use clap::{Parser, Subcommand};

const AFTER_HELP: &str = "\
Pool coordinates, first found wins, key by key:
  1. flags: --pool HOST:PORT, --secret FILE, --token FILE, --local HOST:PORT
  2. environment: CARMI_POOL, CARMI_SECRET, CARMI_TOKEN, CARMI_LOCAL
  3. the embedded pool `carmi pool up` runs on this machine (its record is
     $XDG_STATE_HOME/carmi/pool-up.toml, else ~/.local/state/carmi/pool-up.toml)
  4. the TOML file $CARMI_CONFIG, else $XDG_CONFIG_HOME/carmi/config.toml,
     else $HOME/.config/carmi/config.toml, with keys
     pool = \"HOST:PORT\", secret = \"/abs/path\", token = \"/abs/path\",
     local = \"HOST:PORT\"
  5. unless $CARMI_CONFIG is set, config.toml in the pool's directory
     ($CARMI_DIR, else /etc/carmi for root), which `carmi pool init` and
     `carmi join` write
WoDi programs started by hand find their local RM and secret the same way.

HTCondor-style options are accepted too: -analyze, -constraint, -long.";

#[derive(Parser)]
#[command(
    name = "carmi",
    version,
    about = "Use and administer a CARMI pool",
    after_help = AFTER_HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Set up a pool.
    Pool {
        #[command(subcommand)]
        command: pool::PoolCommand,
    },
    /// Join a pool with the bundle `carmi pool add-machine` or `add-user`
    /// wrote: installs its secret and token into /etc/carmi (as root) or
    /// ~/.config/carmi, then a machine's starts its local RM (--systemd:
    /// as the service); a user's makes `carmi` work with no export.
    Join(join_here::JoinArgs),
    /// Show the pool's machines, their slots and a summary by architecture and state.
    #[command(after_help = AFTER_HELP)]
    Status(status::StatusArgs),
    /// Submit a job described by a submit file; prints its id.
    #[command(after_help = AFTER_HELP)]
    Submit(submit::SubmitArgs),
    /// Show the job queue, or explain one job with -analyze JOB.
    #[command(after_help = AFTER_HELP)]
    Q(jobs::QArgs),
    /// Remove a job: its processes are killed and its machines freed.
    #[command(after_help = AFTER_HELP)]
    Rm(jobs::RmArgs),
    /// Show jobs that left the queue: when, and how they ended (exit status,
    /// removed, or why the master failed to start).
    #[command(after_help = AFTER_HELP)]
    History(history::HistoryArgs),
    /// Wait until a job leaves the queue; exit with its exit status (128+N
    /// for signal N; 1 if removed or failed to start; 124 on --timeout).
    #[command(after_help = AFTER_HELP)]
    Wait(wait::WaitArgs),
    /// Hold jobs: each keeps its place in the queue, its processes are
    /// killed and its machines go back to the pool.
    #[command(after_help = AFTER_HELP)]
    Hold(hold::HoldArgs),
    /// Release held jobs: each waits again at its place and starts from
    /// scratch when its minimums can be met.
    #[command(after_help = AFTER_HELP)]
    Release(hold::ReleaseArgs),
    /// Print a job's events (submitted, master started, hosts added / lost,
    /// held, ended...), one a line; -f follows them until the job ends.
    #[command(after_help = AFTER_HELP)]
    Events(events::EventsArgs),
    /// Write the files an ended job's master sent back (output and error
    /// from another machine, transfer_output_files) into its submit directory.
    #[command(after_help = AFTER_HELP)]
    Fetch(fetch::FetchArgs),
    /// Print a running job's master's standard output (--stderr: error)
    /// from wherever it runs; -f follows it until the job ends.
    #[command(after_help = AFTER_HELP)]
    Logs(logs::LogsArgs),
    /// Create, list and revoke the pool's tokens (admin).
    #[command(after_help = AFTER_HELP)]
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Allocation queues: pilots from a batch system (Slurm) while jobs
    /// wait for hosts (admin).
    #[command(after_help = AFTER_HELP)]
    Alloc {
        #[command(subcommand)]
        command: alloc::AllocCommand,
    },
    /// List the users of the fair share (usage, priority, factor), or set
    /// one's priority factor with --set-factor USER F (admin).
    #[command(after_help = AFTER_HELP)]
    Userprio(userprio::UserPrioArgs),
    /// Open a shell in a running job's sandbox, as condor_ssh_to_job
    /// (not available yet: says what to use instead).
    #[command(name = "ssh_to_job", alias = "ssh-to-job")]
    SshToJob(ssh_to_job::SshToJobArgs),
    /// Print a shell completion script, e.g. `carmi completions bash`.
    Completions(shell::CompletionsArgs),
    /// Write man pages for carmi and each subcommand into a directory.
    Man(shell::ManArgs),
}

/// Runs a future on a small runtime (each command makes one or two requests).
pub(crate) fn block_on<T>(
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(f)
}

/// Runs the `carmi` command line `args` (the program's name first, as
/// `std::env::args_os` gives it) and returns the exit status.
///
/// `launcher` is how to run this same command again, for `pool up`, which
/// starts its background pool as `LAUNCHER pool serve ...`: `None` runs this
/// executable; a program that carries the command in a library passes its
/// own (for Python, `python -m wodi._carmi`).
pub fn run(args: Vec<OsString>, launcher: Option<Vec<OsString>>) -> u8 {
    if let Some(launcher) = launcher {
        embedded::set_launcher(launcher);
    }
    let args: Result<Vec<String>, OsString> = args.into_iter().map(OsString::into_string).collect();
    let args = match args {
        Ok(args) => args,
        Err(bad) => {
            eprintln!("carmi: error: an argument is not valid UTF-8: {bad:?}");
            return 2;
        }
    };
    let cli = Cli::parse_from(jobs::htcondor_args(args));
    let result = match cli.command {
        Command::Wait(args) => {
            return match wait::run(args) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("carmi: error: {e:#}");
                    1
                }
            };
        }
        Command::Pool { command } => pool::run(command),
        Command::Join(args) => join_here::run(&args),
        Command::Token { command } => token::run(command),
        Command::Alloc { command } => alloc::run(command),
        Command::Status(args) => status::run(args),
        Command::Submit(args) => submit::submit(args),
        Command::Q(args) => jobs::q(args),
        Command::Rm(args) => jobs::rm(args),
        Command::History(args) => history::run(args),
        Command::Hold(args) => hold::hold(args),
        Command::Release(args) => hold::release(args),
        Command::Events(args) => events::run(args),
        Command::Fetch(args) => fetch::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Userprio(args) => userprio::run(args),
        Command::SshToJob(args) => ssh_to_job::run(args),
        Command::Completions(args) => shell::completions(args),
        Command::Man(args) => shell::man(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("carmi: error: {e:#}");
            1
        }
    }
}
