//! A local RM a test starts beside a [`Pool`]'s own, with its own daemon
//! token and arguments of its choosing (to aim it at a proxy, or to put a
//! proxy in front of it).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use carmi_api::token::Power;

use crate::{Pool, bin_dir};

/// A local RM started by [`Pool::start_extra_local`], killed when dropped.
pub struct ExtraLocal {
    child: Child,
    log: std::path::PathBuf,
    /// Its application address, as it printed it.
    pub addr: String,
}

impl ExtraLocal {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ExtraLocal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        for parent in crate::cgroups::parents_in_log(&log) {
            crate::cgroups::sweep(&parent);
        }
    }
}

impl Pool {
    /// Starts local RM `name` connecting to the global RM at `global` (the
    /// pool's, or a proxy's), with a daemon token of its own, the pool's
    /// `local.toml`, a work directory and log (`NAME.log`) in the pool's
    /// directory, and `args` added (one slot unless they name `--slots`).
    pub fn start_extra_local(&self, name: &str, global: &str, args: &[&str]) -> ExtraLocal {
        self.spawn_extra(name, self.extra_local_command(name, global, args))
    }

    /// The command [`Pool::start_extra_local`] runs, not yet started: for a
    /// test that expects the local RM to refuse to start (its standard
    /// error goes to `NAME.log` unless the test says otherwise).
    pub fn extra_local_command(&self, name: &str, global: &str, args: &[&str]) -> Command {
        let token = self.dir.join(format!("{name}.token"));
        self.token_file(&token, name, Power::Daemon, Some(name), 3600);
        let mut cmd = Command::new(bin_dir().join("carmi-local"));
        self.extra_args(&mut cmd, name, global, (&self.secret_path, &token));
        cmd.arg("--work-dir").arg(self.dir.join(name)).args(args);
        if !args.contains(&"--slots") {
            cmd.args(["--slots", "1"]);
        }
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        cmd.env("RUST_LOG", "info").stderr(log);
        cmd
    }

    /// [`Pool::start_extra_local`] on the pool's global RM, run as the
    /// unprivileged `uid`:`gid` (through `setpriv`; the test runs as root):
    /// its secret, token and work directory are in `NAME-home/`, which it
    /// owns, as an ordinary user's local RM keeps them.
    pub fn start_extra_local_as(&self, name: &str, uid: u32, gid: u32) -> ExtraLocal {
        let home = self.dir.join(format!("{name}-home"));
        std::fs::create_dir_all(home.join("work")).expect("make the local RM's home");
        let secret = home.join("pool.secret");
        let text = std::fs::read_to_string(&self.secret_path).expect("read the pool secret");
        carmi_api::files::write_private(&secret, &text, false).expect("copy the pool secret");
        let token = home.join(format!("{name}.token"));
        self.token_file(&token, name, Power::Daemon, Some(name), 3600);
        for path in [&home, &home.join("work"), &secret, &token] {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .expect("give the file to the user");
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &uid.to_string(), "--regid", &gid.to_string()])
            .args(["--clear-groups", "--"])
            .arg(bin_dir().join("carmi-local"));
        self.extra_args(&mut cmd, name, &self.global_addr, (&secret, &token));
        cmd.arg("--work-dir")
            .arg(home.join("work"))
            .args(["--slots", "1"]);
        self.spawn_extra(name, cmd)
    }

    fn extra_args(&self, cmd: &mut Command, name: &str, global: &str, keys: (&Path, &Path)) {
        cmd.args(["--global", global, "--secret"])
            .arg(keys.0)
            .arg("--token")
            .arg(keys.1)
            .args(["--name", name, "--config"])
            .arg(self.dir.join("local.toml"));
    }

    fn spawn_extra(&self, name: &str, mut cmd: Command) -> ExtraLocal {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start carmi-local");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("carmi-local printed {line:?}"))
            .to_string();
        ExtraLocal {
            child,
            addr,
            log: log_path,
        }
    }
}
