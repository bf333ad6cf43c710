//! The owner models behind one type, and the merged, time-ordered schedule
//! of owner events for a whole pool in virtual time.
//!
//! The same stream serves a discrete-event simulator (which reads virtual
//! times directly) and a wall-clock driver (the embedded pool's, which waits
//! `time / speedup` before each event). Everything here is pure: the same
//! model, host count and seed always give the same events.

use std::path::{Path, PathBuf};

use carmi_proto::msg::OwnerEvent;

use crate::Error;
use crate::stochastic::{HostOwner, Stochastic};
use crate::trace::{Trace, host_name};

/// One owner event of the schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scheduled {
    /// Virtual seconds from the start.
    pub time: f64,
    /// Host index, 0 for `host01`.
    pub host: usize,
    /// What the owner does.
    pub event: OwnerEvent,
}

/// How owners behave.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum OwnerModel {
    /// Owners never come: every machine is always free.
    #[default]
    None,
    /// Random visits with a day/night rhythm.
    Stochastic(Stochastic),
    /// Events replayed from a trace.
    Trace(Trace),
}

impl OwnerModel {
    /// Parses the command-line form: `none`, `stochastic` (the default
    /// parameters) or `trace:FILE`, where `read` gives the text of `FILE`.
    /// The caller reads the file (usually with `std::fs::read_to_string`) so
    /// that this crate stays free of I/O, and a test can hand in a trace.
    pub fn from_spec_with(
        spec: &str,
        read: impl FnOnce(PathBuf) -> std::io::Result<String>,
    ) -> Result<OwnerModel, Error> {
        match spec {
            "none" => Ok(OwnerModel::None),
            "stochastic" => Ok(OwnerModel::Stochastic(Stochastic::default())),
            _ => match spec.strip_prefix("trace:") {
                Some(file) if !file.is_empty() => {
                    let path = Path::new(file);
                    let text = read(path.to_path_buf()).map_err(|source| Error::Io {
                        what: "cannot read trace file",
                        path: path.to_path_buf(),
                        source,
                    })?;
                    Ok(OwnerModel::Trace(Trace::parse_file(path, &text)?))
                }
                _ => Err(Error::BadModel(format!(
                    "unknown owner model `{spec}`; expected none, stochastic or trace:FILE"
                ))),
            },
        }
    }

    /// Checks the model's parameters.
    pub fn check(&self) -> Result<(), Error> {
        match self {
            OwnerModel::Stochastic(s) => s.check(),
            OwnerModel::None | OwnerModel::Trace(_) => Ok(()),
        }
    }

    /// The owner events of `hosts` hosts, forever (or until a trace ends), in
    /// time order; equal times in host order.
    pub fn stream(&self, hosts: usize, seed: u64) -> OwnerStream {
        let source = match self {
            OwnerModel::None => Source::Empty,
            OwnerModel::Stochastic(s) => {
                let mut owners: Vec<HostOwner> =
                    (0..hosts).map(|h| s.host_events(h, seed)).collect();
                let next = owners.iter_mut().map(Iterator::next).collect();
                Source::Hosts { owners, next }
            }
            OwnerModel::Trace(t) => Source::Trace {
                events: t
                    .events
                    .iter()
                    .filter(|e| e.host < hosts)
                    .map(|e| Scheduled {
                        time: e.time,
                        host: e.host,
                        event: e.event,
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            },
        };
        OwnerStream { source }
    }

    /// Every owner event of `hosts` hosts in `[0, span)` virtual seconds.
    pub fn schedule(&self, hosts: usize, span: f64, seed: u64) -> Vec<Scheduled> {
        self.stream(hosts, seed)
            .take_while(|e| e.time < span)
            .collect()
    }
}

/// The merged, time-ordered owner events of a pool. See [`OwnerModel::stream`].
pub struct OwnerStream {
    source: Source,
}

enum Source {
    Empty,
    Hosts {
        owners: Vec<HostOwner>,
        /// Each host's next event, not yet handed out.
        next: Vec<Option<(f64, OwnerEvent)>>,
    },
    Trace {
        events: std::vec::IntoIter<Scheduled>,
    },
}

impl Iterator for OwnerStream {
    type Item = Scheduled;

    fn next(&mut self) -> Option<Scheduled> {
        match &mut self.source {
            Source::Empty => None,
            Source::Trace { events } => events.next(),
            Source::Hosts { owners, next } => {
                // A linear scan: pools have tens to hundreds of hosts, and
                // ties resolve to the lowest host without extra bookkeeping.
                let host = next
                    .iter()
                    .enumerate()
                    .filter_map(|(h, e)| e.map(|(t, _)| (h, t)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))?
                    .0;
                let (time, event) = next[host].take()?;
                next[host] = owners[host].next();
                Some(Scheduled { time, host, event })
            }
        }
    }
}

/// Writes owner events in the trace format, one per line, so that a
/// generated schedule can be kept, edited and replayed; [`Trace::parse`]
/// reads back exactly the same events.
pub fn format_schedule(events: &[Scheduled]) -> String {
    let mut out = String::from("# host time(s) event\n");
    for e in events {
        let event = match e.event {
            OwnerEvent::Arrive => "arrive".to_string(),
            OwnerEvent::Leave => "leave".to_string(),
            OwnerEvent::Load(x) => format!("load={x}"),
        };
        // `{}` of an f64 prints the shortest text that parses back to it.
        out.push_str(&format!("{} {} {event}\n", host_name(e.host), e.time));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let from_spec = |spec| OwnerModel::from_spec_with(spec, std::fs::read_to_string);
        assert_eq!(from_spec("none").unwrap(), OwnerModel::None);
        assert!(matches!(
            from_spec("stochastic").unwrap(),
            OwnerModel::Stochastic(_)
        ));
        let e = from_spec("sometimes").unwrap_err().to_string();
        assert!(e.contains("sometimes"), "{e}");
        let e = from_spec("trace:/nonexistent/t.txt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/t.txt"), "{e}");
    }

    #[test]
    fn the_none_model_is_silent() {
        assert!(OwnerModel::None.schedule(16, 1e9, 1).is_empty());
    }

    #[test]
    fn trace_events_for_missing_hosts_are_skipped() {
        let t = Trace::parse("host01 1 arrive\nhost05 2 arrive\nhost02 3 leave\n").unwrap();
        let s = OwnerModel::Trace(t).schedule(2, 100.0, 0);
        let hosts: Vec<usize> = s.iter().map(|e| e.host).collect();
        assert_eq!(hosts, [0, 1]);
    }
}
