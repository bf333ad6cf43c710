//! What a submit file may ask of the world around it, which a pure parser
//! cannot do itself: environment variables (`$ENV(NAME)`, `getenv`), item
//! files (`queue .. from FILE`), commands (`queue .. from CMD |`), directory
//! listings (`queue .. matching`) and the submit time (`$(Year)`...).
//! `carmi submit` answers with the real machine; tests answer with fixed
//! values, so that every form of the language is tested without touching
//! the file system.

use std::collections::BTreeMap;

/// The world a submit file is read in.
pub trait SubmitEnv {
    /// The value of environment variable `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
    /// Every environment variable, for `getenv` (sorted by name).
    fn vars(&self) -> Vec<(String, String)>;
    /// The text of `path` (relative to the submit file's directory).
    fn read_file(&self, path: &str) -> Result<String, String>;
    /// The standard output of `command` (words split on white space, no
    /// shell, as HTCondor runs it).
    fn run_command(&self, command: &str) -> Result<String, String>;
    /// The entries of directory `dir` (relative to the submit file's
    /// directory; `""` is that directory): `(name, is_directory)`.
    fn list_dir(&self, dir: &str) -> Result<Vec<(String, bool)>, String>;
    /// Whether `path` names a readable file (`x509userproxy`).
    fn is_file(&self, path: &str) -> bool;
    /// The submit time, seconds since the Unix epoch (`$(SUBMIT_TIME)`).
    fn now_unix(&self) -> i64;
    /// Who submits (the accounting group's user when none is given).
    fn user(&self) -> String;
}

/// A world of fixed values: no environment, no files, no commands unless
/// given. For tests, the fuzzer and [`super::parse`], which must not depend on
/// the machine they run on.
#[derive(Clone, Debug, Default)]
pub struct FixedEnv {
    /// Environment variables.
    pub vars: BTreeMap<String, String>,
    /// Files by path, with their text.
    pub files: BTreeMap<String, String>,
    /// Commands with their output.
    pub commands: BTreeMap<String, String>,
    /// Directories by path (`""`: the submit directory), with entries.
    pub dirs: BTreeMap<String, Vec<(String, bool)>>,
    /// The submit time.
    pub now_unix: i64,
    /// Who submits.
    pub user: String,
}

impl SubmitEnv for FixedEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    fn vars(&self) -> Vec<(String, String)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| format!("cannot read {path}: no such file"))
    }

    fn run_command(&self, command: &str) -> Result<String, String> {
        self.commands
            .get(command)
            .cloned()
            .ok_or_else(|| format!("cannot run `{command}` here"))
    }

    fn list_dir(&self, dir: &str) -> Result<Vec<(String, bool)>, String> {
        self.dirs
            .get(dir)
            .cloned()
            .ok_or_else(|| format!("cannot list {dir:?}: no such directory"))
    }

    fn is_file(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    fn now_unix(&self) -> i64 {
        self.now_unix
    }

    fn user(&self) -> String {
        self.user.clone()
    }
}
