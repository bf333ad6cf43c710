//! This machine's daemon token, shared by everything that presents or
//! checks it: the link to the global RM (at each reconnection), the staging
//! connections to the global RM's store, and the control connection's
//! check of the owner's token. The global RM renews it over the link before
//! it expires (`FromGlobal::TokenRenewed`); [`DaemonToken::renew`] takes the
//! new one, so that each of them sees it from then on.
//!
//! The renewed token goes to the token file (`--token FILE`) atomically: a
//! temporary file of mode 0600 beside it, synced, renamed over it, and the
//! directory synced (`carmi_api::files::write_private`), so a crash leaves
//! the old token or the new one, never half of one. A file that cannot be
//! written is warned about, naming it and why, and the new token is kept in
//! memory: the machine stays in the pool until the local RM restarts (then
//! it reads the file's token, which the global RM leaves live for that).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use carmi_api::machinecert::MachineProver;

/// This machine's daemon token (see the module documentation); cheap to
/// clone, every clone sees a renewal.
#[derive(Clone, Debug, Default)]
pub struct DaemonToken {
    token: Arc<RwLock<Option<String>>>,
    /// Where it is kept across restarts (`None`: a token given in memory,
    /// an in-process pool's).
    file: Option<PathBuf>,
}

impl DaemonToken {
    /// `token` (`None`: a pool without tokens), read from `file` if given.
    pub fn new(token: Option<String>, file: Option<PathBuf>) -> DaemonToken {
        DaemonToken {
            token: Arc::new(RwLock::new(token)),
            file,
        }
    }

    /// The token to present now.
    pub fn get(&self) -> Option<String> {
        // A writer cannot panic half way through replacing a `String`.
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes a renewed token: into the token file, then in use. True if it
    /// is where the next start reads it (the file, or no file to write);
    /// false if the file could not be written (warned, naming the file and
    /// why), the new token then living in memory only.
    pub async fn renew(&self, token: String) -> bool {
        let saved = match &self.file {
            None => true,
            Some(path) => {
                let (at, text) = (path.clone(), format!("{}\n", token.trim()));
                let written = tokio::task::spawn_blocking(move || {
                    carmi_api::files::write_private(&at, &text, true).map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(format!("the write did not finish: {e}")));
                if let Err(e) = &written {
                    tracing::warn!(
                        file = %path.display(),
                        "cannot write the renewed daemon token to its file ({e}); it is kept in memory, so this machine stays in the pool until the local RM restarts, when it reads the older token from the file"
                    );
                }
                written.is_ok()
            }
        };
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(token.trim().to_string());
        tracing::info!(saved, "renewed daemon token taken");
        saved
    }
}

/// The daemon token given (`--token`'s text or file), shared: the global RM renews it over
/// the link (`daemon_token`).
pub(crate) fn daemon_token(
    (token, token_file): (&Option<String>, &Option<PathBuf>),
) -> Result<DaemonToken, crate::Error> {
    Ok(match (token, token_file) {
        (Some(t), _) => DaemonToken::new(Some(t.clone()), None),
        (None, Some(path)) => DaemonToken::new(
            Some(carmi_api::token::read_token_file(path)?),
            Some(path.clone()),
        ),
        (None, None) => DaemonToken::default(),
    })
}

/// A key of this machine to have certified, in a pool with tokens.
pub(crate) fn machine_prover(
    token: &DaemonToken,
) -> Result<Option<Arc<MachineProver>>, crate::Error> {
    if token.get().is_none() {
        return Ok(None);
    }
    let prover = MachineProver::generate().map_err(crate::Error::Tls)?;
    Ok(Some(Arc::new(prover)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn a_renewed_token_replaces_the_file_and_every_clone_sees_it() {
        let dir = crate::test_dir::TempDir::new("token");
        let path = dir.path().join("m1.token");
        carmi_api::files::write_private(&path, "old\n", false).unwrap();
        let token = DaemonToken::new(Some("old".into()), Some(path.clone()));
        let clone = token.clone();
        assert!(token.renew("new".into()).await);
        assert_eq!(clone.get().as_deref(), Some("new"));
        assert_eq!(carmi_api::token::read_token_file(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Nothing but the file is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_written_keeps_the_token_in_memory() {
        // A directory in the file's place cannot be replaced by a rename,
        // as root too.
        let dir = crate::test_dir::TempDir::new("token");
        let path = dir.path().join("m1.token");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "x").unwrap();
        let token = DaemonToken::new(Some("old".into()), Some(path.clone()));
        assert!(!token.renew("new".into()).await);
        assert_eq!(token.get().as_deref(), Some("new"));
        // No token given in a file: nothing to save.
        let memory = DaemonToken::new(Some("old".into()), None);
        assert!(memory.renew("new".into()).await);
        assert_eq!(memory.get().as_deref(), Some("new"));
    }
}
