//! Reading a running process's standard output or error for `carmi logs`:
//! a bounded piece from an offset, as text. Blocking file I/O: the driver
//! calls it from `spawn_blocking`.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use carmi_api::limits::MAX_LOG_CHUNK_BYTES;
use carmi_api::msg::LogChunk;

/// Reads at most [`MAX_LOG_CHUNK_BYTES`] of the first of `paths` that
/// exists, from byte `offset`. A UTF-8 character cut by the end of the read
/// is left for the next read, so that following a log never garbles one.
pub fn read_chunk(paths: &[&Path], offset: u64) -> Result<LogChunk, String> {
    let Some(path) = paths.iter().find(|p| p.exists()) else {
        return Err(
            "the process has no such output file (it writes elsewhere, or it is gone)".into(),
        );
    };
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    // Not through a symbolic link: a job may replace its output file with
    // one, and the local RM (root, perhaps) must not read another file for
    // it; nor a FIFO (which would block the read) or a second name of
    // another file: only the regular file of one name the local RM made.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(format!(
            "{}: not read: the process put something other than its output file there",
            path.display()
        ));
    }
    let size = meta.len();
    if offset >= size {
        return Ok(LogChunk {
            text: String::new(),
            next: offset,
            size,
        });
    }
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_LOG_CHUNK_BYTES)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let keep = complete_prefix(&bytes);
    bytes.truncate(keep);
    Ok(LogChunk {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        next: offset + keep as u64,
        size,
    })
}

/// How many leading bytes of `bytes` to send: all but a UTF-8 character
/// the read cut in two (invalid bytes are sent, and shown as U+FFFD).
fn complete_prefix(bytes: &[u8]) -> usize {
    // A character is at most 4 bytes: look for its lead byte among the last 3.
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        let need = match b {
            0x00..=0x7f => return bytes.len(),
            0x80..=0xbf => continue,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            _ => 4,
        };
        return if need > back {
            bytes.len() - back
        } else {
            bytes.len()
        };
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_from_the_offset_and_says_where_to_go_on() {
        let dir = crate::test_dir::TempDir::new("logread");
        let p = dir.path().join("stdout");
        std::fs::write(&p, "first\nsecond\n").unwrap();
        let c = read_chunk(&[&dir.path().join("missing"), &p], 6).unwrap();
        assert_eq!(c.text, "second\n");
        assert_eq!((c.next, c.size), (13, 13));
        let c = read_chunk(&[&p], 13).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("", 13));
    }

    #[test]
    fn a_cut_character_is_left_for_the_next_read() {
        assert_eq!(complete_prefix("aé".as_bytes()), 3);
        assert_eq!(complete_prefix(&"aé".as_bytes()[..2]), 1);
        assert_eq!(complete_prefix(&"a€".as_bytes()[..3]), 1);
        assert_eq!(complete_prefix(b"ab"), 2);
        assert_eq!(complete_prefix(b""), 0);
    }

    #[test]
    fn one_read_carries_at_most_the_limit() {
        let dir = crate::test_dir::TempDir::new("logread-big");
        let p = dir.path().join("stdout");
        let size = MAX_LOG_CHUNK_BYTES + 10;
        std::fs::write(&p, vec![b'x'; size as usize]).unwrap();
        let c = read_chunk(&[&p], 0).unwrap();
        assert_eq!(
            (c.text.len() as u64, c.next, c.size),
            (MAX_LOG_CHUNK_BYTES, MAX_LOG_CHUNK_BYTES, size)
        );
        let c = read_chunk(&[&p], c.next).unwrap();
        assert_eq!((c.text.len(), c.next), (10, size));
    }

    #[test]
    fn no_file_is_a_clear_error() {
        let dir = crate::test_dir::TempDir::new("logread");
        let e = read_chunk(&[&dir.path().join("stdout")], 0).unwrap_err();
        assert!(e.contains("no such output file"), "{e}");
    }

    #[test]
    fn an_output_file_replaced_by_a_link_is_not_followed() {
        let dir = crate::test_dir::TempDir::new("logread-link");
        let key = dir.path().join("pool.secret");
        std::fs::write(&key, "the local RM's key").unwrap();
        let out = dir.path().join("stdout");
        std::os::unix::fs::symlink(&key, &out).unwrap();
        let e = read_chunk(&[&out], 0).unwrap_err();
        assert!(!e.contains("local RM's key"), "{e}");
        // Nor a second name of it, nor a FIFO (which would block the read).
        std::fs::remove_file(&out).unwrap();
        std::fs::hard_link(&key, &out).unwrap();
        let e = read_chunk(&[&out], 0).unwrap_err();
        assert!(e.contains("not read"), "{e}");
        std::fs::remove_file(&out).unwrap();
        nix::unistd::mkfifo(&out, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_chunk(&[&out], 0).unwrap_err();
        assert!(e.contains("not read"), "{e}");
    }
}
