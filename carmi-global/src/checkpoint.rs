//! A job's checkpoint kept for its next master (the router's
//! `Output::SaveCheckpoint`): the files its master sent back as it exited,
//! from the store of returned files, copied into the executable store by
//! content, where a local RM fetches them as it fetches a placed master's
//! input files. Blocking file I/O: the driver calls it from `spawn_blocking`.

use carmi_api::exe::sha256_hex;
use carmi_api::msg::{ExecutableRef, JobFiles};

use crate::returned::ReturnedStore;
use crate::store::ExeStore;

/// Copies the files of `sent` named in `names` into `store`; their
/// references, or why the checkpoint cannot be kept.
pub fn save(
    returned: &ReturnedStore,
    store: &ExeStore,
    sent: &JobFiles,
    names: &[String],
) -> Result<Vec<ExecutableRef>, String> {
    let payload = returned.read(sent)?;
    let mut at = 0usize;
    let mut kept = Vec::new();
    for f in &sent.files {
        let end = at + f.size as usize;
        let bytes = payload
            .get(at..end)
            .ok_or_else(|| format!("the stored copy of {} is short", f.name))?;
        at = end;
        if !names.contains(&f.name) {
            continue;
        }
        let exe = ExecutableRef {
            name: f.name.clone(),
            sha256: sha256_hex(bytes),
            size: f.size,
        };
        store
            .put(&exe, bytes)
            .map_err(|e| format!("cannot store checkpoint file {}: {e}", f.name))?;
        kept.push(exe);
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::ProcessId;
    use carmi_api::msg::ReturnedFile;

    #[test]
    fn only_the_checkpoints_files_are_kept_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let returned = ReturnedStore::open(dir.path()).unwrap();
        let (store, _) = ExeStore::open(dir.path()).unwrap();
        let file = |name: &str, size| ReturnedFile {
            name: name.into(),
            size,
            truncated: false,
            dest: String::new(),
        };
        let files = vec![file("stdout", 3), file("counter", 2)];
        returned.put(ProcessId(7), &files, b"out42").unwrap();
        let sent = JobFiles {
            process: ProcessId(7),
            files,
        };
        let kept = save(&returned, &store, &sent, &["counter".into()]).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!((kept[0].name.as_str(), kept[0].size), ("counter", 2));
        let (_, bytes) = store.get(&kept[0].sha256).unwrap().expect("stored");
        assert_eq!(bytes, b"42");
        returned.remove(ProcessId(7));
        assert!(save(&returned, &store, &sent, &["counter".into()]).is_err());
    }
}
