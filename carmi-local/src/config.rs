//! Configuration: the command line, an optional TOML file, and their merge
//! into [`Settings`] (command line wins over the file, the file over defaults).
//!
//! ```toml
//! name = "lab-pc-07"          # optional: machine name in the pool
//! slots = 2                   # optional: default one per CPU
//! gpus = 2                    # optional: GPUs advertised (default: those found; see `crate::gpu`)
//! listen = "127.0.0.1:9620"   # optional: where applications connect
//! work_dir = "/var/tmp/carmi" # optional
//! kill_grace_ms = 2000        # SIGTERM -> SIGKILL delay
//! heartbeat_ms = 5000         # used only if the global RM does not name a period
//! stage_link_rate = 50.0      # MB/s cap on executables served to peers (default: none)
//! stage_listen = "0.0.0.0:9622"        # where peers fetch executables (default: beside listen)
//! stage_advertise = "lab-pc-07:9622"   # the address peers are told (behind NAT or a proxy)
//! slot_users = ["carmi-slot1", "carmi-slot2"]  # as root: accounts jobs run as ([] = root's own)
//! slot_user_prefix = "carmi-slot"  # or: PREFIX1, PREFIX2, ... made with useradd (the default as root)
//! global_direct = "manager:9618"  # the global RM itself, when --global names relays
//! metrics_addr = "127.0.0.1:9619"  # serve /metrics for Prometheus (default: off; docs/metrics.md)
//! cgroups = false             # run jobs unbound: no request_memory limit, no cgroup kill
//!                             # (default: a cgroup per process where one is usable)
//!
//! [attributes]                # extra machine attributes
//! Owner = '"alice"'           # a string is ClassAd expression text
//! HasMatlab = true            # booleans and numbers are taken as literals
//! Rank = 'TARGET.Owner == "alice" ? 10 : 0'
//!
//! [policy]                    # the owner policy (see `crate::policy`); all optional
//! minute = 60.0               # seconds in one policy minute; smaller speeds everything up
//! start = "KeyboardIdle > 15 * Minute && NonPoolLoad < 0.3"
//! suspend = "KeyboardIdle < Minute || NonPoolLoad > 0.7"
//! continue = "KeyboardIdle > 5 * Minute && NonPoolLoad < 0.3"
//! preempt = 'Activity == "Suspended" && ActivityTimer > 10 * Minute'
//! kill = 'Activity == "Vacating" && ActivityTimer > VacateGrace'
//! vacate_grace = 10.0         # SIGTERM -> SIGKILL on vacate, seconds, scaled by minute / 60
//!
//! [owner]
//! source = "real"             # "real": measure this machine's keyboard and load;
//!                             # "simulated": the owner starts away (idle for a long
//!                             # time) and only reported owner events change that
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use classad::{Expr, ParseError, parse_expr};
use serde::Deserialize;

use crate::isolation::AccountsConfig;
use crate::policy::PolicyConfig;

#[path = "config_attrs.rs"]
mod attrs;
pub use attrs::parse_attr_arg;
use attrs::table_attribute;

/// Default SIGTERM -> SIGKILL grace period.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// Heartbeat period used when the global RM names none (a period of 0).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// Command-line arguments of `carmi-local`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "carmi-local",
    version,
    about = "CARMI local resource manager: lends this machine's slots to the pool",
    after_help = "Owner policy (configuration file):\n  \
[policy] minute = 60.0 (seconds per policy minute), start, suspend, continue, preempt, kill\n  \
(ClassAd expressions over State, Activity, KeyboardIdle, LoadAvg, NonPoolLoad,\n  \
ActivityTimer, StateTimer, Minute, VacateGrace), vacate_grace = 10.0 (seconds, scaled by minute/60)\n  \
[owner] source = \"real\" | \"simulated\" (also --owner)"
)]
pub struct Cli {
    /// Address of the global RM, or of relays in front of it (`carmi-relay`;
    /// several, separated by commas, tried in turn at each reconnection).
    #[arg(
        long,
        value_name = "HOST:PORT[,HOST:PORT...]",
        required_unless_present = "remove_slot_users"
    )]
    pub global: Option<String>,
    /// The global RM's own address, when `--global` names relays: executables
    /// are fetched from it and tokens checked with it, which relays do not carry.
    #[arg(long, value_name = "HOST:PORT")]
    pub global_direct: Option<String>,
    /// File holding the pool's shared secret.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "remove_slot_users"
    )]
    pub secret: Option<PathBuf>,
    /// File holding this machine's daemon token (`carmi token create
    /// --authz daemon --machine NAME`), mode 0600; required by a pool whose
    /// global RM has a signing key.
    #[arg(long, value_name = "FILE")]
    pub token: Option<PathBuf>,
    /// TOML configuration file (attributes, slots, ...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Machine name in the pool (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Extra machine attribute; VALUE is a ClassAd expression. Repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE")]
    pub attrs: Vec<String>,
    /// Number of slots (default: one per CPU).
    #[arg(long)]
    pub slots: Option<u32>,
    /// GPUs of this machine, shared among its slots, when detection misses
    /// them or some are kept (0); default: those `nvidia-smi` or
    /// /proc/driver/nvidia find.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Where application processes connect (default 127.0.0.1:0, any free port).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Where other machines fetch executables from this one (its staging
    /// listener; default: the --listen host, any free port). A fixed port
    /// is one a firewall can open.
    #[arg(long, value_name = "HOST:PORT")]
    pub stage_listen: Option<String>,
    /// The address other machines are told to fetch from, when it is not
    /// the one bound (a NAT, a port forward or a relay in between);
    /// default: the bound address.
    #[arg(long, value_name = "HOST:PORT")]
    pub stage_advertise: Option<String>,
    /// Serve this machine's metrics (Prometheus' text format, plain HTTP,
    /// no token: docs/metrics.md) at http://HOST:PORT/metrics; off by
    /// default. Bind loopback or an address only the monitoring host reaches.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Directory for the executable cache, sandboxes and outputs.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Where owner activity comes from: `real` (this machine's keyboard and
    /// load) or `simulated` (owner events from the control connection only).
    #[arg(long, value_name = "SOURCE")]
    pub owner: Option<OwnerSource>,
    /// The owner comes back for good at this wall-clock time (seconds since
    /// the Unix epoch), as if someone sat down at the machine: a pilot's
    /// time limit, less a lead time, so that its hosts are vacated before
    /// the batch system ends it. Needs a simulated owner.
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub owner_returns_at: Option<u64>,
    /// Stop (killing every process) after this many seconds without a
    /// registration with the global RM, counted from the start or from the
    /// loss of the last one: a pilot whose global RM stays away leaves its
    /// batch allocation instead of idling in it. Default: wait for ever.
    #[arg(long, value_name = "SECONDS")]
    pub orphan_timeout: Option<u64>,
    /// Started as root: the accounts job processes run as, comma-separated
    /// (dedicated to the pool; each serves one job at a time; at least one
    /// per slot and two more), or `none` to run them as root. Default as
    /// root: `--slot-user-prefix carmi-slot`. An account another local RM
    /// of this machine holds stops the start, naming it and that local RM.
    #[arg(long, value_name = "USER,...")]
    pub slot_users: Option<String>,
    /// Started as root: jobs run as PREFIX1, PREFIX2, ...: one per slot and
    /// two more, the first names no other local RM of this machine holds
    /// (so a second one takes the next), created with `useradd` when missing.
    #[arg(long, value_name = "PREFIX", conflicts_with = "slot_users")]
    pub slot_user_prefix: Option<String>,
    /// Delete the accounts PREFIX1, PREFIX2, ... that a prefix made
    /// (--slot-user-prefix, else the --config file's slot_user_prefix, else
    /// carmi-slot), except those a running local RM holds; say which were
    /// removed and which kept and why; then exit. Needs root.
    #[arg(long, conflicts_with = "slot_users")]
    pub remove_slot_users: bool,
}

/// Where the owner's activity comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OwnerSource {
    /// Measure this machine: terminal and input device idle time, load not ours.
    Real,
    /// Only `OwnerEvent`s (in-process or over the control connection); the
    /// owner starts away, idle for a long time.
    Simulated,
}

/// The `[policy]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Seconds in one policy minute.
    pub minute: Option<f64>,
    /// `START` expression.
    pub start: Option<String>,
    /// `SUSPEND` expression.
    pub suspend: Option<String>,
    /// `CONTINUE` expression.
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
    /// `PREEMPT` expression.
    pub preempt: Option<String>,
    /// `KILL` expression.
    pub kill: Option<String>,
    /// SIGTERM -> SIGKILL on vacate, seconds before scaling by `minute / 60`.
    pub vacate_grace: Option<f64>,
}

/// The `[owner]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerFile {
    /// Where owner activity comes from.
    pub source: Option<OwnerSource>,
}

/// The TOML configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Machine name.
    pub name: Option<String>,
    /// Number of slots.
    pub slots: Option<u32>,
    /// GPUs advertised, replacing the number found.
    pub gpus: Option<u32>,
    /// Application listen address.
    pub listen: Option<String>,
    /// Work directory.
    pub work_dir: Option<PathBuf>,
    /// SIGTERM -> SIGKILL delay in milliseconds.
    pub kill_grace_ms: Option<u64>,
    /// Heartbeat period used if the global RM names none.
    pub heartbeat_ms: Option<u64>,
    /// Cap on the bandwidth of executables served to peers, in MB/s.
    pub stage_link_rate: Option<f64>,
    /// Where peers fetch executables from this machine (`--stage-listen`).
    pub stage_listen: Option<String>,
    /// The staging address peers are told (`--stage-advertise`).
    pub stage_advertise: Option<String>,
    /// The global RM's own address when `--global` names relays.
    pub global_direct: Option<String>,
    /// Where the metrics page is served (`--metrics-addr`).
    pub metrics_addr: Option<String>,
    /// Whether processes run in cgroups bound to their job's requests.
    pub cgroups: Option<bool>,
    /// Accounts job processes run as (root only); empty: root's own.
    pub slot_users: Option<Vec<String>>,
    /// Accounts `PREFIX1`... job processes run as, made if missing (root only).
    pub slot_user_prefix: Option<String>,
    /// Extra attributes: a string is expression text, a boolean or number a literal.
    #[serde(default)]
    pub attributes: toml::Table,
    /// The owner policy.
    #[serde(default)]
    pub policy: PolicyFile,
    /// The owner activity source.
    #[serde(default)]
    pub owner: OwnerFile,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file cannot be read.
    #[error("cannot read configuration file {path}: {error}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// The configuration file is not valid TOML or has unknown settings.
    #[error("configuration file {path}: {error}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// What and where.
        error: Box<toml::de::Error>,
    },
    /// An attribute expression does not parse.
    #[error("attribute `{name}` ({origin}): syntax error at {error}")]
    BadExpression {
        /// The attribute.
        name: String,
        /// Where it was given (`--attr`, or the config file).
        origin: String,
        /// Line, column and what was expected.
        error: ParseError,
    },
    /// An attribute has a name ClassAds cannot use, or a value of an unusable type.
    #[error("attribute `{name}` ({origin}): {reason}")]
    BadAttribute {
        /// The attribute as written.
        name: String,
        /// Where it was given.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// A setting is out of range.
    #[error("setting `{setting}`: {reason}")]
    BadSetting {
        /// The setting.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Everything the daemon needs, resolved and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Addresses of the global RM or of relays in front of it, separated by
    /// commas: the link to the global RM tries them in turn.
    pub global: String,
    /// The global RM's own address, for what relays do not carry (fetching
    /// executables, asking about tokens); `None`: the first of `global`.
    pub global_direct: Option<String>,
    /// The pool secret's file (absolute, since processes get it in `CARMI_SECRET_FILE`).
    pub secret_file: PathBuf,
    /// Machine name in the pool.
    pub name: String,
    /// Number of slots; `None` means one per detected CPU.
    pub slots: Option<u32>,
    /// GPUs of the machine as configured; `None`: those detected.
    pub gpus: Option<u32>,
    /// Application listen address.
    pub listen: String,
    /// Staging listener's address; `None`: the application listener's
    /// host, any free port.
    pub stage_listen: Option<String>,
    /// The staging address told to peers; `None`: the one bound.
    pub stage_advertise: Option<String>,
    /// Where `/metrics` is served (plain HTTP); `None`: nowhere.
    pub metrics_addr: Option<String>,
    /// Work directory (cache, sandboxes, outputs, benchmark result).
    pub work_dir: PathBuf,
    /// Extra attributes in order (file first, then `--attr`); later ones win.
    pub attributes: Vec<(String, Expr)>,
    /// SIGTERM -> SIGKILL delay.
    pub kill_grace: Duration,
    /// Heartbeat period if the global RM names none.
    pub heartbeat_fallback: Duration,
    /// Whether to run (or load) the benchmark; tests may skip it.
    pub benchmark: bool,
    /// The owner policy.
    pub policy: PolicyConfig,
    /// Where owner activity comes from.
    pub owner_source: OwnerSource,
    /// Cap on the bandwidth of executables served to peers, in MB/s
    /// (10^6 bytes); `None` is unlimited.
    pub stage_link_rate: Option<f64>,
    /// Most messages waiting to be written to the global RM (more wait in
    /// the driver while the queue drains).
    pub global_queue: usize,
    /// How long a full queue to the global RM may not move before the global
    /// RM counts as not reading: the link is dropped and made again.
    pub global_stall: Duration,
    /// Most messages waiting to be written to one application; one that
    /// stops reading fills it and is disconnected.
    pub app_queue: usize,
    /// Most application connections one job's processes hold open here at
    /// once ([`crate::perjob::MAX_CONNECTIONS_PER_JOB`]).
    pub max_connections_per_job: usize,
    /// File holding this machine's daemon token, presented to the global RM.
    pub token_file: Option<PathBuf>,
    /// The token itself (an in-process pool's); wins over `token_file`.
    pub token: Option<String>,
    /// How long the daemon may be without a registration with the global
    /// RM before it stops; `None`: for ever.
    pub orphan_limit: Option<Duration>,
    /// Which accounts job processes run as ([`crate::isolation`]).
    pub accounts: AccountsConfig,
    /// Whether each process runs in a cgroup bound to its job's requests,
    /// where one is usable ([`crate::cgroup`]); `false`: all run unbound.
    pub cgroups: bool,
}

impl Settings {
    /// The global RM's own address: `global_direct`, else `global`, which
    /// may list several managers, one active (docs/standby.md): whoever
    /// dials it goes on to the next on a refusal (`carmi_api::admin`, the
    /// stager).
    pub fn direct(&self) -> String {
        match &self.global_direct {
            Some(d) => d.clone(),
            None => carmi_api::admin::managers(&self.global).join(","),
        }
    }

    /// Settings with defaults for everything but the global RM and the secret.
    pub fn new(global: impl Into<String>, secret_file: impl Into<PathBuf>) -> Settings {
        let name = crate::machine::host_name();
        Settings {
            global: global.into(),
            global_direct: None,
            secret_file: absolute(&secret_file.into()),
            token_file: None,
            token: None,
            work_dir: default_work_dir(&name),
            name,
            slots: None,
            gpus: None,
            listen: "127.0.0.1:0".into(),
            stage_listen: None,
            stage_advertise: None,
            metrics_addr: None,
            attributes: Vec::new(),
            kill_grace: DEFAULT_KILL_GRACE,
            heartbeat_fallback: DEFAULT_HEARTBEAT,
            benchmark: true,
            policy: PolicyConfig::default(),
            owner_source: OwnerSource::Real,
            stage_link_rate: None,
            global_queue: crate::global::GLOBAL_QUEUE,
            global_stall: crate::global::GLOBAL_STALL,
            app_queue: crate::apps::APP_QUEUE,
            max_connections_per_job: crate::perjob::MAX_CONNECTIONS_PER_JOB,
            orphan_limit: None,
            // An embedded pool runs its jobs as the user who started it.
            accounts: AccountsConfig::Own,
            cgroups: true,
        }
    }

    /// Merges the command line with the configuration file it names, if any.
    pub fn from_cli(cli: &Cli) -> Result<Settings, ConfigError> {
        let file = match &cli.config {
            Some(path) => Some((path.clone(), read_config_file(path)?)),
            None => None,
        };
        let required = |setting: &'static str| ConfigError::BadSetting {
            setting,
            reason: "missing (required to run the daemon)".into(),
        };
        let global = cli.global.clone().ok_or_else(|| required("--global"))?;
        let secret = cli.secret.clone().ok_or_else(|| required("--secret"))?;
        let mut s = Settings::new(global, secret);
        s.token_file = cli.token.clone();
        s.global_direct = cli.global_direct.clone();
        s.orphan_limit = cli.orphan_timeout.map(Duration::from_secs);
        s.accounts = AccountsConfig::Default;
        let (mut name_set, mut work_dir_set) = (false, false);
        if let Some((path, f)) = &file {
            (name_set, work_dir_set) = s.apply_file(path, f)?;
        }
        let (cli_name, cli_work_dir) = s.apply_cli(cli)?;
        let (name_set, work_dir_set) = (name_set || cli_name, work_dir_set || cli_work_dir);
        // The default work directory is per name, so that several local RMs
        // sharing a machine under different names do not share sandboxes.
        if name_set && !work_dir_set {
            s.work_dir = default_work_dir(&s.name);
        }
        s.check()?;
        Ok(s)
    }

    /// Takes what the configuration file at `path` sets; whether it named
    /// the machine and the work directory.
    fn apply_file(&mut self, path: &Path, f: &FileConfig) -> Result<(bool, bool), ConfigError> {
        let (mut name_set, mut work_dir_set) = (false, false);
        if let Some(n) = &f.name {
            self.name = n.clone();
            name_set = true;
        }
        self.slots = f.slots.or(self.slots);
        self.gpus = f.gpus.or(self.gpus);
        // The command line's, if it named one, wins.
        if self.global_direct.is_none() {
            self.global_direct = f.global_direct.clone();
        }
        if let Some(l) = &f.listen {
            self.listen = l.clone();
        }
        if let Some(w) = &f.work_dir {
            self.work_dir = w.clone();
            work_dir_set = true;
        }
        if let Some(ms) = f.kill_grace_ms {
            self.kill_grace = Duration::from_millis(ms);
        }
        if let Some(on) = f.cgroups {
            self.cgroups = on;
        }
        if let Some(ms) = f.heartbeat_ms {
            if ms == 0 {
                return Err(ConfigError::BadSetting {
                    setting: "heartbeat_ms",
                    reason: "must be at least 1".into(),
                });
            }
            self.heartbeat_fallback = Duration::from_millis(ms);
        }
        if let Some(rate) = f.stage_link_rate {
            if rate.is_nan() || rate <= 0.0 || rate.is_infinite() {
                return Err(ConfigError::BadSetting {
                    setting: "stage_link_rate",
                    reason: format!("{rate} is not a positive number of MB/s"),
                });
            }
            self.stage_link_rate = Some(rate);
        }
        self.stage_listen.clone_from(&f.stage_listen);
        self.stage_advertise.clone_from(&f.stage_advertise);
        self.metrics_addr.clone_from(&f.metrics_addr);
        let origin = format!("configuration file {}", path.display());
        for (name, value) in &f.attributes {
            self.attributes.push(table_attribute(name, value, &origin)?);
        }
        apply_policy(&mut self.policy, &f.policy, &origin)?;
        if let Some(src) = f.owner.source {
            self.owner_source = src;
        }
        if let Some(a) = accounts_config(f.slot_users.clone(), f.slot_user_prefix.clone()) {
            self.accounts = a;
        }
        Ok((name_set, work_dir_set))
    }

    /// Takes what the command line sets, over the file; whether it named
    /// the machine and the work directory.
    fn apply_cli(&mut self, cli: &Cli) -> Result<(bool, bool), ConfigError> {
        let (mut name_set, mut work_dir_set) = (false, false);
        let cli_users = cli.slot_users.as_ref().map(|list| {
            list.split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty() && n != "none")
                .collect()
        });
        if let Some(a) = accounts_config(cli_users, cli.slot_user_prefix.clone()) {
            self.accounts = a;
        }
        if let Some(src) = cli.owner {
            self.owner_source = src;
        }
        if let Some(n) = &cli.name {
            self.name = n.clone();
            name_set = true;
        }
        self.slots = cli.slots.or(self.slots);
        self.gpus = cli.gpus.or(self.gpus);
        if let Some(l) = &cli.listen {
            self.listen = l.clone();
        }
        if cli.stage_listen.is_some() {
            self.stage_listen.clone_from(&cli.stage_listen);
        }
        if cli.stage_advertise.is_some() {
            self.stage_advertise.clone_from(&cli.stage_advertise);
        }
        if cli.metrics_addr.is_some() {
            self.metrics_addr.clone_from(&cli.metrics_addr);
        }
        if let Some(w) = &cli.work_dir {
            self.work_dir = w.clone();
            work_dir_set = true;
        }
        for a in &cli.attrs {
            self.attributes.push(parse_attr_arg(a)?);
        }
        Ok((name_set, work_dir_set))
    }

    /// The prefix `--remove-slot-users` removes the accounts of: the
    /// command line's, else the configuration file's, else the default.
    pub fn removal_prefix(cli: &Cli) -> Result<String, ConfigError> {
        if let Some(p) = &cli.slot_user_prefix {
            return Ok(p.clone());
        }
        let file = match &cli.config {
            Some(path) => read_config_file(path)?.slot_user_prefix,
            None => None,
        };
        Ok(file.unwrap_or_else(|| crate::isolation::DEFAULT_PREFIX.into()))
    }

    /// Checks values that cannot be right.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::BadSetting {
                setting: "name",
                reason: "the machine name is empty".into(),
            });
        }
        // `slots = 0` is allowed: a submit machine lends no slots but serves
        // the applications that connect to it.
        Ok(())
    }
}

/// The accounts a list or a prefix names (an empty list: none, jobs run as
/// the daemon's user); `None` when neither is given.
fn accounts_config(users: Option<Vec<String>>, prefix: Option<String>) -> Option<AccountsConfig> {
    match (users, prefix) {
        (_, Some(p)) => Some(AccountsConfig::Prefix(p)),
        (Some(u), None) if u.is_empty() => Some(AccountsConfig::Own),
        (Some(u), None) => Some(AccountsConfig::Users(u)),
        (None, None) => None,
    }
}

/// Applies a `[policy]` table to `policy`, checking every value.
pub fn apply_policy(
    policy: &mut PolicyConfig,
    f: &PolicyFile,
    origin: &str,
) -> Result<(), ConfigError> {
    if let Some(m) = f.minute {
        if !(m.is_finite() && m > 0.0) {
            return Err(ConfigError::BadSetting {
                setting: "policy.minute",
                reason: format!("must be a positive number of seconds, not {m}"),
            });
        }
        policy.minute = m;
    }
    if let Some(g) = f.vacate_grace {
        if !(g.is_finite() && g >= 0.0) {
            return Err(ConfigError::BadSetting {
                setting: "policy.vacate_grace",
                reason: format!("must be zero or more seconds, not {g}"),
            });
        }
        policy.vacate_grace = g;
    }
    let exprs = [
        ("start", &f.start, &mut policy.start),
        ("suspend", &f.suspend, &mut policy.suspend),
        ("continue", &f.continue_, &mut policy.continue_),
        ("preempt", &f.preempt, &mut policy.preempt),
        ("kill", &f.kill, &mut policy.kill),
    ];
    for (key, text, slot) in exprs {
        if let Some(text) = text {
            *slot = parse_expr(text).map_err(|error| ConfigError::BadExpression {
                name: format!("policy.{key}"),
                origin: origin.to_string(),
                error,
            })?;
        }
    }
    Ok(())
}

fn read_config_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::ReadFile {
        path: path.to_path_buf(),
        error,
    })?;
    parse_config(&text).map_err(|error| ConfigError::Toml {
        path: path.to_path_buf(),
        error: Box::new(error),
    })
}

/// Parses configuration file text.
pub fn parse_config(text: &str) -> Result<FileConfig, toml::de::Error> {
    toml::from_str(text)
}

fn default_work_dir(name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // Root's home is closed to the slot users who must reach their sandboxes.
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/carmi-local").join(safe);
    }
    match std::env::var_os("HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home)
            .join(".local/state/carmi-local")
            .join(safe),
        _ => std::env::temp_dir().join(format!("carmi-local-{safe}")),
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
