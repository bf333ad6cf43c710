//! Where the lines the WoDi server logs go.
//!
//! The server a master starts is a child process; left to inherit the
//! terminal, its WARN lines were written straight through whatever the
//! application draws there (the main job's progress bar was torn by them).
//! The master reads the server's standard error instead and hands each line
//! to the sink set with [`set_sink`]: by default this process's standard
//! error, one whole line at a time; a progress display sets a sink that
//! prints the line above its bar.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, RwLock};

/// A function that shows one log line of the server (without its newline).
pub type Sink = Arc<dyn Fn(&str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sends the server's log lines to `sink` from now on (for every master of
/// this process); `None` puts them back on this process's standard error.
pub fn set_sink(sink: Option<Sink>) {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
}

/// Shows one line through the current sink, as the master does with each
/// line the server logs.
pub fn show(line: &str) {
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    match sink {
        Some(sink) => sink(line),
        None => eprintln!("{line}"),
    }
}

/// Reads `from` (the server's standard error) line by line until it closes,
/// showing each line. A thread of its own, not a task: the server may log
/// after the master's runtime is gone, and an unread pipe would block it.
pub(crate) fn forward(from: impl Read + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("wodi-server-log".into())
        .spawn(move || forward_lines(from));
    if let Err(e) = spawned {
        eprintln!("wodi: cannot follow the server's log: {e}");
    }
}

fn forward_lines(from: impl Read) {
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                show(text.trim_end_matches(['\n', '\r']));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn the_servers_lines_reach_the_sink_whole_and_in_order() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let into = seen.clone();
        set_sink(Some(Arc::new(move |l: &str| {
            into.lock().unwrap().push(l.to_string())
        })));
        let (reader, mut writer) = std::io::pipe().unwrap();
        // A line written in two pieces is still shown as one.
        writer.write_all(b"WARN first li").unwrap();
        writer.flush().unwrap();
        writer
            .write_all(b"ne\nWARN second\nno newline at the end")
            .unwrap();
        drop(writer);
        forward_lines(reader);
        set_sink(None);
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["WARN first line", "WARN second", "no newline at the end"]
        );
    }
}
