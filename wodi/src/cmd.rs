//! The command worker's step format: a step's data is a command line run by
//! `sh -c`, and its result is the command's standard output. A command that
//! exits non-zero fails its step with its status and standard error, so that
//! users in any language can use WoDi without writing Rust.

use std::process::Command;

/// Runs one command line; its stdout on success, or a description of the failure.
pub fn run_command(line: &[u8]) -> Result<Vec<u8>, String> {
    let line = std::str::from_utf8(line).map_err(|e| format!("the command is not UTF-8: {e}"))?;
    let out = Command::new("sh")
        .arg("-c")
        .arg(line)
        .output()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_failure() {
        assert_eq!(run_command(b"echo hi").unwrap(), b"hi\n");
        let err = run_command(b"echo oops >&2; exit 3").unwrap_err();
        assert!(err.contains("oops") && err.contains('3'), "{err}");
    }
}
