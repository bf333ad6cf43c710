//! An SVG picture of a run in the manner of the CARMI/WoDi paper's Figure 9:
//! one row per host (allocated, busy with a step, suspended, lost), cycle
//! boundaries marked, and below it the number of hosts held and working
//! over time.

use std::fmt::Write;

/// What a host was doing during a period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Allocated to the job, no step running.
    Allocated,
    /// Running a step.
    Busy,
    /// Suspended by its owner.
    Suspended,
}

/// One period of one host, in seconds from the start of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Period {
    /// Start.
    pub start: f64,
    /// End.
    pub end: f64,
    /// What the host did.
    pub activity: Activity,
}

/// One host's row.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Row {
    /// Host name.
    pub host: String,
    /// Its periods, in any order (busy periods lie inside allocated ones).
    pub periods: Vec<Period>,
    /// Times at which the host was taken away while allocated.
    pub losses: Vec<f64>,
}

/// What the picture shows.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Timeline {
    /// Length of the run, seconds.
    pub length: f64,
    /// One row per host.
    pub rows: Vec<Row>,
    /// Ends of cycles, seconds.
    pub cycle_ends: Vec<f64>,
    /// A title line.
    pub title: String,
}

const LEFT: f64 = 120.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const ROW: f64 = 14.0;
const PLOT_W: f64 = 900.0;
const COUNT_H: f64 = 120.0;

/// Renders the timeline as a standalone SVG document.
pub fn svg(t: &Timeline) -> String {
    let length = t.length.max(1e-9);
    let x = |s: f64| LEFT + (s / length).clamp(0.0, 1.0) * PLOT_W;
    let rows_h = ROW * t.rows.len() as f64;
    let count_top = TOP + rows_h + 50.0;
    let height = count_top + COUNT_H + 60.0;
    let width = LEFT + PLOT_W + RIGHT;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(&t.title)
    );
    legend(&mut s, LEFT, 36.0);
    for (i, row) in t.rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y + ROW - 4.0,
            escape(&row.host)
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y}" width="{PLOT_W}" height="{}" fill="#f4f4f4"/>"##,
            ROW - 2.0
        );
        // Allocated first, then busy and suspended on top.
        for pass in [Activity::Allocated, Activity::Suspended, Activity::Busy] {
            for p in row.periods.iter().filter(|p| p.activity == pass) {
                let (fill, inset) = match p.activity {
                    Activity::Allocated => ("#cfe3f7", 0.0),
                    Activity::Busy => ("#6e6e6e", 1.0),
                    Activity::Suspended => ("#f2a33a", 0.0),
                };
                let w = (x(p.end) - x(p.start)).max(0.5);
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}" stroke="white" stroke-width="{inset}"/>"#,
                    x(p.start),
                    y,
                    w,
                    ROW - 2.0
                );
            }
        }
        for &l in &row.losses {
            let _ = writeln!(
                s,
                r#"<rect x="{:.2}" y="{y}" width="6" height="{}" fill="black"/>"#,
                x(l) - 3.0,
                ROW - 2.0
            );
        }
    }
    for &c in &t.cycle_ends {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.2}" x2="{0:.2}" y1="{1}" y2="{2}" stroke="#c0392b" stroke-width="0.6" stroke-dasharray="3,2"/>"##,
            x(c),
            TOP - 4.0,
            TOP + rows_h
        );
    }
    axis(&mut s, t.length, TOP + rows_h + 4.0, &x);
    counts(&mut s, t, count_top, &x);
    axis(&mut s, t.length, count_top + COUNT_H + 4.0, &x);
    let _ = writeln!(s, "</svg>");
    s
}

fn legend(s: &mut String, x0: f64, y: f64) {
    let items = [
        ("#cfe3f7", "allocated, idle"),
        ("#6e6e6e", "busy with a step"),
        ("#f2a33a", "suspended by owner"),
        ("black", "lost (vacated)"),
    ];
    let mut x = x0;
    for (fill, label) in items {
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{fill}"/><text x="{}" y="{y}">{label}</text>"#,
            y - 9.0,
            x + 14.0
        );
        x += 30.0 + 6.5 * label.len() as f64;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{x}" x2="{}" y1="{}" y2="{}" stroke="#c0392b" stroke-dasharray="3,2"/><text x="{}" y="{y}">end of cycle</text>"##,
        x + 14.0,
        y - 4.0,
        y - 4.0,
        x + 18.0
    );
}

fn axis(s: &mut String, length: f64, y: f64, x: &dyn Fn(f64) -> f64) {
    let step = nice_step(length / 8.0);
    let mut t = 0.0;
    while t <= length + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.2}" x2="{0:.2}" y1="{y}" y2="{1}" stroke="#888"/><text x="{0:.2}" y="{2}" text-anchor="middle">{3}</text>"##,
            x(t),
            y + 4.0,
            y + 15.0,
            clock(t)
        );
        t += step;
    }
}

/// The lower graph: hosts held (outline) and hosts busy (filled), sampled.
fn counts(s: &mut String, t: &Timeline, top: f64, x: &dyn Fn(f64) -> f64) {
    let samples = 300;
    let mut held = Vec::with_capacity(samples);
    let mut busy = Vec::with_capacity(samples);
    for i in 0..samples {
        let at = t.length * (i as f64 + 0.5) / samples as f64;
        let during = |a: Activity| {
            t.rows
                .iter()
                .filter(|r| {
                    r.periods
                        .iter()
                        .any(|p| p.activity == a && p.start <= at && at < p.end)
                })
                .count()
        };
        held.push(during(Activity::Allocated).max(during(Activity::Busy)));
        busy.push(during(Activity::Busy));
    }
    let max = held.iter().copied().max().unwrap_or(0).max(1) as f64;
    let y = |n: usize| top + COUNT_H - n as f64 / max * COUNT_H;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">hosts</text>"#,
        LEFT - 6.0,
        top - 6.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{}" text-anchor="end">0</text>"#,
        LEFT - 6.0,
        top + 8.0,
        max as usize,
        LEFT - 6.0,
        top + COUNT_H
    );
    let w = PLOT_W / samples as f64;
    for i in 0..samples {
        let at = t.length * i as f64 / samples as f64;
        let _ = writeln!(
            s,
            r##"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#cfe3f7"/><rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#6e6e6e"/>"##,
            x(at),
            y(held[i]),
            w + 0.2,
            top + COUNT_H - y(held[i]),
            x(at),
            y(busy[i]),
            w + 0.2,
            top + COUNT_H - y(busy[i])
        );
    }
}

fn nice_step(raw: f64) -> f64 {
    let candidates = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
    ];
    candidates
        .iter()
        .copied()
        .find(|c| *c >= raw)
        .unwrap_or(3600.0 * (raw / 3600.0).ceil())
}

/// `m:ss` for short runs, `h:mm` for long ones.
fn clock(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}:{:02}h", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_period_loss_and_cycle() {
        let t = Timeline {
            length: 100.0,
            title: "run <1>".into(),
            cycle_ends: vec![50.0, 100.0],
            rows: vec![Row {
                host: "host01".into(),
                periods: vec![
                    Period {
                        start: 0.0,
                        end: 80.0,
                        activity: Activity::Allocated,
                    },
                    Period {
                        start: 5.0,
                        end: 40.0,
                        activity: Activity::Busy,
                    },
                    Period {
                        start: 40.0,
                        end: 60.0,
                        activity: Activity::Suspended,
                    },
                ],
                losses: vec![80.0],
            }],
        };
        let out = svg(&t);
        assert!(out.starts_with("<svg"));
        assert!(out.trim_end().ends_with("</svg>"));
        assert!(out.contains("run &lt;1&gt;"));
        assert!(out.contains("host01"));
        assert_eq!(out.matches("stroke-dasharray=\"3,2\"").count(), 3);
        assert!(out.contains("#f2a33a"));
        assert_eq!(clock(75.0), "1:15");
        assert_eq!(clock(3720.0), "1:02h");
    }
}
