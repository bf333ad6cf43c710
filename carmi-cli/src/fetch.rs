//! `carmi fetch JOB`: writes the files an ended job's master sent back into
//! the submit directory: its `output` and `error` when the global RM placed
//! it on another machine than the submit machine, and its
//! `transfer_output_files` (into `initialdir`, by file name) wherever it
//! ran. `carmi wait` does the same as the job ends.
//!
//! A fetched file replaces what is at its destination, as HTCondor's
//! transfer does; a master that ran on the submit machine wrote its output
//! and error in place, and those are never sent back, so nothing the master
//! wrote itself is overwritten. A file cut at the global RM's limit
//! (`carmi_api::limits::MAX_RETURNED_BYTES`) is written cut, with a warning.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use carmi_api::admin::request_with_payload;
use carmi_api::handshake::Secret;
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, JobFiles, ToGlobal};
use clap::Args;

use crate::config::PoolArgs;
use crate::jobs::{connect, failed};

/// `carmi fetch` options.
#[derive(Args)]
pub struct FetchArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The ended job, as `C` or `C.P`
    job: crate::select::Target,
}

/// Runs `carmi fetch`: prints each file written.
pub fn run(args: FetchArgs) -> anyhow::Result<()> {
    let (pool, secret) = connect(&args.pool)?;
    let written = crate::block_on(async {
        let job = crate::select::one_job(&pool, &secret, &args.job).await?;
        bring_back(&pool, &secret, job).await
    })?;
    for path in written {
        println!("{path}");
    }
    Ok(())
}

/// Asks the global RM for `job`'s files and writes them; the paths written.
pub async fn bring_back(pool: &str, secret: &Secret, job: JobId) -> anyhow::Result<Vec<String>> {
    let (answer, payload) =
        request_with_payload(pool, secret, &[], ToGlobal::FetchFiles { job }).await?;
    let FromGlobal::Files(files) = answer else {
        return Err(failed(answer, &format!("fetch of job {}", job.0)));
    };
    write_files(&files, &payload)
}

/// Writes each file of `files` (their bytes one after the other in
/// `payload`) at its destination; the paths written.
pub fn write_files(files: &JobFiles, payload: &[u8]) -> anyhow::Result<Vec<String>> {
    let total: u64 = files.files.iter().map(|f| f.size).sum();
    if total != payload.len() as u64 {
        anyhow::bail!(
            "the global RM sent {} bytes for files of {total} bytes",
            payload.len()
        );
    }
    let mut at = 0usize;
    let mut written = Vec::new();
    for f in &files.files {
        let bytes = &payload[at..at + f.size as usize];
        at += f.size as usize;
        write_one(Path::new(&f.dest), bytes)
            .with_context(|| format!("cannot write {} (the master's {})", f.dest, f.name))?;
        if f.truncated {
            eprintln!(
                "carmi: warning: {} was cut to {} bytes (the limit of what a master sends back)",
                f.dest, f.size
            );
        }
        written.push(f.dest.clone());
    }
    Ok(written)
}

/// Writes `bytes` beside `dest`, then renames it over `dest`, so that a
/// reader never sees half a file.
fn write_one(dest: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = dest.file_name().context("no file name")?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".carmi-fetch");
    let tmp = dest.with_file_name(tmp_name);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dest).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::ProcessId;
    use carmi_api::msg::ReturnedFile;

    #[test]
    fn files_land_at_their_destinations() {
        let dir = std::env::temp_dir().join(format!("carmi-fetch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("out"), b"old").unwrap();
        let file = |name: &str, size, dest: &str| ReturnedFile {
            name: name.into(),
            size,
            truncated: false,
            dest: dir.join(dest).to_string_lossy().into_owned(),
        };
        let files = JobFiles {
            process: ProcessId(4),
            files: vec![file("stdout", 3, "out"), file("r.txt", 2, "r.txt")],
        };
        let written = write_files(&files, b"new42").unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(std::fs::read(dir.join("out")).unwrap(), b"new");
        assert_eq!(std::fs::read(dir.join("r.txt")).unwrap(), b"42");
        assert!(write_files(&files, b"too long").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
