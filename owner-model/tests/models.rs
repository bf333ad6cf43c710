//! The owner models as a simulator sees them: schedules in virtual time.

use carmi_proto::msg::OwnerEvent;
use owner_model::trace::Trace;
use owner_model::{OwnerModel, Regime, Scheduled, Shape, Stochastic};

const HOUR: f64 = 3600.0;
const DAY: f64 = 24.0 * HOUR;

/// Seconds each host's owner is present within `[from, to)`, summed over hosts,
/// together with the length of the window times the hosts.
fn presence(
    schedule: &[Scheduled],
    hosts: usize,
    span: f64,
    window: impl Fn(f64) -> bool,
) -> (f64, f64) {
    // Sample every minute: simple, and exact enough for fractions.
    let mut present = vec![false; hosts];
    let mut i = 0;
    let (mut on, mut total) = (0.0, 0.0);
    let mut t = 0.0;
    while t < span {
        while i < schedule.len() && schedule[i].time <= t {
            let e = schedule[i];
            match e.event {
                OwnerEvent::Arrive => present[e.host] = true,
                OwnerEvent::Leave => present[e.host] = false,
                OwnerEvent::Load(_) => {}
            }
            i += 1;
        }
        if window(t) {
            on += present.iter().filter(|p| **p).count() as f64;
            total += hosts as f64;
        }
        t += 60.0;
    }
    (on, total)
}

#[test]
fn a_seed_fixes_the_schedule_and_another_seed_changes_it() {
    let m = OwnerModel::Stochastic(Stochastic::default());
    let a = m.schedule(16, 3.0 * DAY, 42);
    let b = m.schedule(16, 3.0 * DAY, 42);
    let c = m.schedule(16, 3.0 * DAY, 43);
    assert!(a.len() > 100, "{} events", a.len());
    assert_eq!(a, b);
    assert_ne!(a, c);
    // Time order, within the span, and alternation per host.
    assert!(a.windows(2).all(|w| w[0].time <= w[1].time));
    assert!(a.iter().all(|e| (0.0..3.0 * DAY).contains(&e.time)));
    for h in 0..16 {
        let events: Vec<OwnerEvent> = a.iter().filter(|e| e.host == h).map(|e| e.event).collect();
        assert!(
            events.windows(2).all(|w| w[0] != w[1]),
            "host {h}: {events:?}"
        );
    }
}

#[test]
fn adding_hosts_keeps_the_other_hosts_schedules() {
    let m = OwnerModel::Stochastic(Stochastic::default());
    let small = m.schedule(4, DAY, 9);
    let big: Vec<Scheduled> = m
        .schedule(8, DAY, 9)
        .into_iter()
        .filter(|e| e.host < 4)
        .collect();
    assert_eq!(small, big);
}

#[test]
fn the_fraction_of_time_present_is_as_configured() {
    for shape in [Shape::Exponential, Shape::LogNormal { sigma: 1.0 }] {
        let r = Regime {
            mean_present: 20.0 * 60.0,
            mean_absent: 60.0 * 60.0,
        };
        let m = OwnerModel::Stochastic(Stochastic {
            shape,
            ..Stochastic::flat(r)
        });
        let span = 20.0 * DAY;
        let s = m.schedule(32, span, 5);
        let (on, total) = presence(&s, 32, span, |_| true);
        let f = on / total;
        assert!((f - r.fraction_present()).abs() < 0.03, "{shape:?}: {f}");
    }
}

#[test]
fn owners_are_present_more_in_working_hours() {
    let model = Stochastic::default();
    let m = OwnerModel::Stochastic(model.clone());
    let span = 14.0 * DAY;
    let s = m.schedule(32, span, 11);
    let (won, wtot) = presence(&s, 32, span, |t| model.is_working_hours(t));
    let (oon, otot) = presence(&s, 32, span, |t| !model.is_working_hours(t));
    let (work, off) = (won / wtot, oon / otot);
    // Configured: 67% in working hours, 6% off hours (regime changes blur it a little).
    assert!(work > 0.5 && work < 0.8, "working hours {work}");
    assert!(off < 0.15, "off hours {off}");
    // Overall, near the ~24% the module documents.
    let all = (won + oon) / (wtot + otot);
    assert!((0.17..0.32).contains(&all), "overall {all}");
}

#[test]
fn trace_errors_name_the_line() {
    let cases = [
        ("host01 0 arrive\nhost01 x leave\n", 2, "time `x`"),
        ("# c\n\nhost01 1 dance\n", 3, "unknown event `dance`"),
        ("pc7 1 arrive\n", 1, "host `pc7`"),
        ("host01 1\n", 1, "found 2 fields"),
        ("host01 1 load=-2\n", 1, "load `-2`"),
        ("host00 1 arrive\n", 1, "host `host00`"),
        ("host01 -1 arrive\n", 1, "time `-1`"),
    ];
    for (text, line, what) in cases {
        let e = Trace::parse(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.to_string().contains(what), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}:")), "{e}");
    }
}

#[test]
fn a_trace_file_replays_in_time_order() {
    // The caller reads the file; here the "file" is a string handed to the reader.
    let file = |text: &'static str| {
        move |path: std::path::PathBuf| {
            assert_eq!(path, std::path::Path::new("dir/t.txt"));
            Ok(text.to_string())
        }
    };
    let spec = "trace:dir/t.txt";
    let m = OwnerModel::from_spec_with(
        spec,
        file("host02 30 leave\nhost02 10 arrive\n1 20 load=0.5\n"),
    )
    .unwrap();
    let s = m.schedule(2, 25.0, 0);
    assert_eq!(
        s,
        [
            Scheduled {
                time: 10.0,
                host: 1,
                event: OwnerEvent::Arrive
            },
            Scheduled {
                time: 20.0,
                host: 0,
                event: OwnerEvent::Load(0.5)
            },
        ]
    );
    let e = OwnerModel::from_spec_with(spec, file("host02 30 leave\nhost02 ten arrive\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.txt") && e.contains("line 2"), "{e}");
    let missing = |_| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    let e = OwnerModel::from_spec_with(spec, missing)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot read trace file dir/t.txt: "), "{e}");
}

#[test]
fn a_generated_schedule_survives_the_trace_format() {
    let m = OwnerModel::Stochastic(Stochastic::default());
    let s = m.schedule(12, 2.0 * DAY, 77);
    let text = owner_model::format_schedule(&s);
    let back = OwnerModel::Trace(Trace::parse(&text).unwrap()).schedule(12, 2.0 * DAY, 0);
    assert_eq!(back, s);
    let loads = [Scheduled {
        time: 0.25,
        host: 0,
        event: OwnerEvent::Load(1.75),
    }];
    let text = owner_model::format_schedule(&loads);
    assert_eq!(text.lines().nth(1), Some("host01 0.25 load=1.75"));
}
