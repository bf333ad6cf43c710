//! Trace replay: owner events read from a text file.
//!
//! # Format
//! One event per line, three fields separated by white space:
//!
//! ```text
//! # host   time(s)  event
//! host01   0        arrive
//! host01   600.5    leave
//! 3        120      load=0.8     # a bare number N means hostNN
//! ```
//!
//! - `host`: `hostNN` (the names the embedded pool gives its hosts, `host01`
//!   first) or a bare number `N >= 1` for the same host.
//! - `time`: seconds from the start of the trace, a non-negative number.
//! - `event`: `arrive`, `leave` or `load=X` (the load average the owner's own
//!   programs cause, a non-negative number).
//!
//! `#` starts a comment; blank lines are ignored. Lines need not be in time
//! order (events are sorted by time, keeping file order for equal times).
//! Events for hosts the pool does not have are skipped when scheduling.

use std::path::Path;

use carmi_proto::msg::OwnerEvent;

use crate::Error;

/// One line of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEvent {
    /// Seconds from the start.
    pub time: f64,
    /// Host index, 0 for `host01`.
    pub host: usize,
    /// What the owner did.
    pub event: OwnerEvent,
}

/// A parsed trace, sorted by time.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Trace {
    /// The events in time order.
    pub events: Vec<TraceEvent>,
}

/// A mistake in a trace, with its line.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("line {line}: {message}")]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl Trace {
    /// Parses trace text.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut events = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("");
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields.is_empty() {
                continue;
            }
            let err = |message: String| TraceError { line, message };
            if fields.len() != 3 {
                return Err(err(format!(
                    "expected `host time event`, found {} field{}",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                )));
            }
            let host = parse_host(fields[0]).map_err(err)?;
            let time: f64 = fields[1]
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite() && *t >= 0.0)
                .ok_or_else(|| {
                    err(format!(
                        "time `{}` is not a non-negative number of seconds",
                        fields[1]
                    ))
                })?;
            let event = parse_event(fields[2]).map_err(err)?;
            events.push(TraceEvent { time, host, event });
        }
        // Stable: equal times keep file order.
        events.sort_by(|a, b| a.time.total_cmp(&b.time));
        Ok(Trace { events })
    }

    /// Parses the text of the trace file at `path` (read by the caller);
    /// errors name the file and the line.
    pub fn parse_file(path: &Path, text: &str) -> Result<Trace, Error> {
        Trace::parse(text).map_err(|error| Error::Trace {
            path: path.to_path_buf(),
            error,
        })
    }
}

/// The machine name of host index `i` (`host01` for 0): the names the
/// embedded pool gives its hosts, which a trace uses to say whose owner acts.
pub fn host_name(i: usize) -> String {
    format!("host{:02}", i + 1)
}

fn parse_host(s: &str) -> Result<usize, String> {
    let digits = s.strip_prefix("host").unwrap_or(s);
    match digits.parse::<usize>() {
        Ok(n) if n >= 1 && !digits.starts_with('+') => Ok(n - 1),
        _ => Err(format!("host `{s}` is neither `hostNN` nor a number >= 1")),
    }
}

fn parse_event(s: &str) -> Result<OwnerEvent, String> {
    match s {
        "arrive" => Ok(OwnerEvent::Arrive),
        "leave" => Ok(OwnerEvent::Leave),
        _ => match s.strip_prefix("load=") {
            Some(x) => x
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(OwnerEvent::Load)
                .ok_or_else(|| format!("load `{x}` is not a non-negative number")),
            None => Err(format!(
                "unknown event `{s}`; expected arrive, leave or load=X"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_names_numbers_and_sorts() {
        let t = Trace::parse(
            "# a comment\n\nhost02 10 leave   # trailing\n1 5.5 arrive\nhost02 0 load=1.5\n",
        )
        .unwrap();
        let got: Vec<(f64, usize, OwnerEvent)> =
            t.events.iter().map(|e| (e.time, e.host, e.event)).collect();
        assert_eq!(
            got,
            [
                (0.0, 1, OwnerEvent::Load(1.5)),
                (5.5, 0, OwnerEvent::Arrive),
                (10.0, 1, OwnerEvent::Leave),
            ]
        );
    }
}
