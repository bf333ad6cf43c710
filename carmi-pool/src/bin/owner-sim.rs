//! `owner-sim`: owner schedules as trace files, and an embedded pool in the
//! foreground.
//!
//! - `owner-sim schedule --hosts N --span SECONDS [--owners MODEL] [--seed S]`
//!   prints the owner events of a model in the trace format (replay them with
//!   `--owners trace:FILE`).
//! - `owner-sim pool [--hosts N] [--owners MODEL] [--speedup X] [--seed S]`
//!   runs an embedded pool until Ctrl-C, printing where it is; the pool
//!   cleans up after itself on SIGINT and SIGTERM.
//! - `owner-sim drive --secret FILE [--owners MODEL] [--speedup X] [--seed S] LOCAL...`
//!   plays the owners of running local RMs (given by their listen addresses,
//!   host01 first) over their control connections, until Ctrl-C; the local
//!   RMs must run with `[owner] source = "simulated"`.

use std::io::Write;
use std::process::ExitCode;

use carmi_pool::{EmbeddedPool, PoolOptions};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "owner-sim",
    version,
    about = "Simulated machine owners and an embedded CARMI pool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's owner events in the trace format.
    Schedule {
        /// Number of hosts.
        #[arg(long, default_value_t = 16)]
        hosts: usize,
        /// Virtual seconds to cover.
        #[arg(long, default_value_t = 86400.0)]
        span: f64,
        /// Owner model: none, stochastic, or trace:FILE.
        #[arg(long, default_value = "stochastic", value_name = "MODEL")]
        owners: String,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Play the owners of running local RMs over their control connections until Ctrl-C.
    Drive {
        /// The pool's secret file.
        #[arg(long, value_name = "FILE")]
        secret: std::path::PathBuf,
        /// A token file: in a pool with tokens, a local RM's control
        /// connection needs an admin token (or that machine's own daemon
        /// token) [env: CARMI_TOKEN]
        #[arg(long, value_name = "FILE")]
        token: Option<std::path::PathBuf>,
        /// Owner model: none, stochastic, or trace:FILE.
        #[arg(long, default_value = "stochastic", value_name = "MODEL")]
        owners: String,
        /// Virtual seconds per wall second.
        #[arg(long, default_value_t = 1.0)]
        speedup: f64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Listen addresses (HOST:PORT) of the local RMs, the first playing host01.
        #[arg(required = true, value_name = "LOCAL")]
        locals: Vec<String>,
    },
    /// Run an embedded pool in the foreground until Ctrl-C.
    Pool {
        /// Number of hosts.
        #[arg(long, default_value_t = 16)]
        hosts: usize,
        /// Owner model: none, stochastic, or trace:FILE.
        #[arg(long, default_value = "none", value_name = "MODEL")]
        owners: String,
        /// Virtual seconds per wall second.
        #[arg(long, default_value_t = 1.0)]
        speedup: f64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("owner-sim: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Schedule {
            hosts,
            span,
            owners,
            seed,
        } => {
            let model = carmi_pool::read_owner_model(&owners)?;
            model.check()?;
            let events = model.schedule(hosts, span, seed);
            std::io::stdout().write_all(carmi_pool::format_schedule(&events).as_bytes())?;
            Ok(())
        }
        Command::Drive {
            secret,
            token,
            owners,
            speedup,
            seed,
            locals,
        } => {
            let model = carmi_pool::read_owner_model(&owners)?;
            model.check()?;
            if !(speedup.is_finite() && speedup > 0.0) {
                return Err(format!("--speedup must be positive, got {speedup}").into());
            }
            let token =
                token.or_else(|| std::env::var_os(carmi_api::coords::ENV_TOKEN).map(Into::into));
            let token = token
                .map(|t| carmi_api::token::read_token_file(&t))
                .transpose()?;
            let secret = carmi_api::handshake::Secret::from_file(&secret)?.with_token(token);
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                let mut targets = Vec::new();
                for addr in &locals {
                    targets.push(std::sync::Arc::new(
                        carmi_pool::driver::RemoteOwner::connect(addr, &secret).await?,
                    ));
                }
                let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    let _ = stop_tx.send(true);
                });
                eprintln!(
                    "owner-sim: playing the owners of {} local RMs ({owners}, {speedup}x); Ctrl-C stops",
                    targets.len()
                );
                let report = carmi_pool::driver::drive(
                    model.stream(targets.len(), seed),
                    &targets,
                    speedup,
                    tokio::time::Instant::now(),
                    stop_rx,
                )
                .await;
                eprintln!("owner-sim: {report:?}");
                Ok::<(), Box<dyn std::error::Error>>(())
            })
        }
        Command::Pool {
            hosts,
            owners,
            speedup,
            seed,
        } => {
            let opts = PoolOptions {
                hosts,
                owners: carmi_pool::read_owner_model(&owners)?,
                speedup,
                seed,
                handle_signals: true,
                ..PoolOptions::default()
            };
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                let pool = EmbeddedPool::start(opts).await?;
                let mut out = std::io::stdout().lock();
                writeln!(out, "pool {}", pool.global_addr())?;
                writeln!(out, "secret {}", pool.secret_file().display())?;
                writeln!(out, "local {}", pool.submit_addr())?;
                writeln!(out, "dir {}", pool.dir().display())?;
                out.flush()?;
                drop(out);
                // The pool's own signal handler shuts it down and exits.
                std::future::pending::<()>().await;
                drop(pool);
                Ok(())
            })
        }
    }
}
