//! Prometheus' text exposition format (version 0.0.4), written by hand:
//! both daemons' `/metrics` pages are a few families of gauges, counters
//! and histograms, which this builder writes in a few lines each, where a
//! client library would bring its own registry and global state for what
//! is a string. `docs/metrics.md` lists the families each daemon serves.
//!
//! Each family is declared once ([`Exposition::family`]) and its samples
//! follow at once, as the format requires; label values are escaped.

use std::fmt::Write;

/// The `Content-Type` of a page in this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples mean to Prometheus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down (a count of slots now).
    Gauge,
    /// A value that only grows while the daemon runs (refusals so far).
    Counter,
    /// Observations in cumulative buckets, with their sum and count.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

/// A histogram's state: observations counted per upper bound (cumulative
/// when written), their sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Buckets {
    /// Upper bounds (seconds, bytes...) and how many observations were at
    /// most each, not cumulative: [`Exposition::histogram`] sums them up.
    pub counts: Vec<(f64, u64)>,
    /// Observations above the last bound.
    pub over: u64,
    /// Sum of all observations.
    pub sum: f64,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Declares the family `name` with its help line and kind; its samples
    /// must follow before the next family.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.name());
        self
    }

    /// One sample of the current family, with its labels (name, value).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
        self
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// A whole histogram family `name` (its `_bucket`, `_sum` and `_count`
    /// samples, buckets cumulative up to `+Inf`).
    pub fn histogram(&mut self, name: &str, help: &str, b: &Buckets) -> &mut Self {
        self.family(name, Kind::Histogram, help);
        let bucket = format!("{name}_bucket");
        let mut total = 0;
        for (le, n) in &b.counts {
            total += n;
            let le = number(*le);
            self.sample(&bucket, &[("le", le.as_str())], total as f64);
        }
        total += b.over;
        self.sample(&bucket, &[("le", "+Inf")], total as f64);
        self.sample(&format!("{name}_sum"), &[], b.sum);
        self.sample(&format!("{name}_count"), &[], total as f64)
    }

    /// The page.
    pub fn finish(self) -> String {
        self.text
    }
}

/// A label value with `\`, `"` and line feeds escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A value as the format writes it (`+Inf`, `NaN`, integers without `.0`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        let sign = if v > 0.0 { "+" } else { "-" };
        format!("{sign}Inf")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escapes_are_written_as_prometheus_reads_them() {
        let mut e = Exposition::new();
        e.family("carmi_jobs", Kind::Gauge, "Jobs.\nBy state")
            .sample("carmi_jobs", &[("state", "run"), ("user", "a\"b\\c")], 2.0);
        e.single("carmi_x_total", Kind::Counter, "X.", 1.5);
        let b = Buckets {
            counts: vec![(0.001, 2), (0.01, 1)],
            over: 1,
            sum: 0.5,
        };
        e.histogram("carmi_h_seconds", "H.", &b);
        let text = e.finish();
        let want = "# HELP carmi_jobs Jobs.\\nBy state\n# TYPE carmi_jobs gauge\n\
                    carmi_jobs{state=\"run\",user=\"a\\\"b\\\\c\"} 2\n\
                    # HELP carmi_x_total X.\n# TYPE carmi_x_total counter\ncarmi_x_total 1.5\n\
                    # HELP carmi_h_seconds H.\n# TYPE carmi_h_seconds histogram\n\
                    carmi_h_seconds_bucket{le=\"0.001\"} 2\ncarmi_h_seconds_bucket{le=\"0.01\"} 3\n\
                    carmi_h_seconds_bucket{le=\"+Inf\"} 4\ncarmi_h_seconds_sum 0.5\n\
                    carmi_h_seconds_count 4\n";
        assert_eq!(text, want);
    }
}
