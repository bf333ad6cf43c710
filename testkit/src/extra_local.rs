//! A local RM a test starts beside a [`Pool`]'s own, with its own daemon
//! token and arguments of its choosing (to aim it at a proxy, or to put a
//! proxy in front of it).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use carmi_api::token::Power;

use crate::{Pool, bin_dir};

/// A local RM started by [`Pool::start_extra_local`], killed when dropped.
pub struct ExtraLocal {
    child: Child,
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
    }
}

impl Pool {
    /// Starts local RM `name` connecting to the global RM at `global` (the
    /// pool's, or a proxy's), with a daemon token of its own, the pool's
    /// `local.toml`, a work directory and log (`NAME.log`) in the pool's
    /// directory, and `args` added (one slot unless they name `--slots`).
    pub fn start_extra_local(&self, name: &str, global: &str, args: &[&str]) -> ExtraLocal {
        let mut child = self
            .extra_local_command(name, global, args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start carmi-local");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")));
                panic!("carmi-local printed {line:?}\n{}", log.unwrap_or_default())
            })
            .to_string();
        ExtraLocal { child, addr }
    }

    /// The command [`Pool::start_extra_local`] runs, not yet started: for a
    /// test that expects the local RM to refuse to start (its standard
    /// error goes to `NAME.log` unless the test says otherwise).
    pub fn extra_local_command(&self, name: &str, global: &str, args: &[&str]) -> Command {
        let token = self.dir.join(format!("{name}.token"));
        self.token_file(&token, name, Power::Daemon, Some(name), 3600);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(bin_dir().join("carmi-local"));
        cmd.args(["--global", global, "--secret"])
            .arg(&self.secret_path)
            .arg("--token")
            .arg(&token)
            .args(["--name", name, "--config"])
            .arg(self.dir.join("local.toml"))
            .arg("--work-dir")
            .arg(self.dir.join(name))
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(log);
        if !args.contains(&"--slots") {
            cmd.args(["--slots", "1"]);
        }
        cmd
    }
}
