//! A relay (`carmi-relay`) a test starts in front of a [`Pool`]'s global RM,
//! with an admin token of its own; killed when dropped.

use std::process::{Child, Command, Stdio};

use carmi_api::token::Power;

use crate::{Pool, bin_dir};

/// A running relay.
pub struct Relay {
    child: Child,
    /// Where machines connect to it.
    pub addr: String,
    /// Its name.
    pub name: String,
}

impl Relay {
    /// Kills it with SIGKILL, as a lost machine would: its machines'
    /// connections drop with it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Pool {
    /// Starts relay `name` on a free port of 127.0.0.1 in front of this
    /// pool's global RM, with an admin token (`NAME.token`) and its log in
    /// `NAME.log`, and `args` added (a `--global` among them replaces the
    /// pool's own address).
    pub fn start_relay(&self, name: &str, args: &[&str]) -> Relay {
        let token = self.dir.join(format!("{name}.token"));
        self.token_file(&token, name, Power::Admin, None, 3600);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(bin_dir().join("carmi-relay"));
        cmd.args(["--listen", "127.0.0.1:0"]);
        if !args.contains(&"--global") {
            cmd.args(["--global", &self.global_addr]);
        }
        let mut child = cmd
            .arg("--secret-file")
            .arg(&self.secret_path)
            .arg("--token-file")
            .arg(&token)
            .args(["--name", name])
            .args(args)
            .env("RUST_LOG", "info,carmi_relay=debug")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start carmi-relay");
        let addr = crate::daemon_lines(&mut child, "carmi-relay", 1).remove(0);
        Relay {
            child,
            addr,
            name: name.to_string(),
        }
    }
}
