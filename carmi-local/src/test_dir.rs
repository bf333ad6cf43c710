//! A temporary directory for tests, in a module of its own (not in `spawn`'s
//! tests) so that the modules whose tests use it do not depend on `spawn`.

use std::fs;
use std::path::{Path, PathBuf};

/// A temporary directory removed on drop (tests only; no extra dependency).
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "carmi-local-test-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
