//! The submit file's world, for real: this process's environment, the files
//! and directories beside the submit file, commands run there, the clock.

use std::path::PathBuf;

use carmi_api::submit::SubmitEnv;

/// The machine `carmi submit` runs on, with paths relative to `base` (the
/// submit file's directory).
pub struct MachineEnv {
    base: PathBuf,
}

impl MachineEnv {
    /// The world of a submit file in directory `base`.
    pub fn new(base: PathBuf) -> MachineEnv {
        MachineEnv { base }
    }
}

impl SubmitEnv for MachineEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn vars(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        v.sort();
        v
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        let p = self.base.join(path);
        if let Ok(m) = std::fs::metadata(&p)
            && m.len() > carmi_api::limits::MAX_SUBMIT_FILE_BYTES as u64
        {
            return Err(format!(
                "{} bytes, above the limit of {} bytes for an item file",
                m.len(),
                carmi_api::limits::MAX_SUBMIT_FILE_BYTES
            ));
        }
        std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }

    fn run_command(&self, command: &str) -> Result<String, String> {
        let mut words = command.split_whitespace();
        let program = words.next().ok_or("no command given")?;
        let out = std::process::Command::new(program)
            .args(words)
            .current_dir(&self.base)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run `{command}`: {e}"))?;
        if !out.status.success() {
            return Err(format!("`{command}` failed ({})", out.status));
        }
        if out.stdout.len() > carmi_api::limits::MAX_SUBMIT_FILE_BYTES {
            return Err(format!(
                "`{command}` printed more than {} bytes of items",
                carmi_api::limits::MAX_SUBMIT_FILE_BYTES
            ));
        }
        String::from_utf8(out.stdout)
            .map_err(|_| format!("`{command}` printed text that is not UTF-8"))
    }

    fn list_dir(&self, dir: &str) -> Result<Vec<(String, bool)>, String> {
        let p = self.base.join(dir);
        let entries =
            std::fs::read_dir(&p).map_err(|e| format!("cannot list {}: {e}", p.display()))?;
        Ok(entries
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                Some((name, e.path().is_dir()))
            })
            .collect())
    }

    fn is_file(&self, path: &str) -> bool {
        self.base.join(path).is_file()
    }

    fn now_unix(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    }

    fn user(&self) -> String {
        crate::jobs::user_name()
    }
}
