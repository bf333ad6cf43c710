//! What `carmi q` says of a job's published progress (`SetJobAttrs`): one
//! line for a WoDi run, from its `Wodi*` attributes, so that a person at a
//! terminal sees what the dashboard shows.

/// `cycle 3: 12 of 31 steps, 2 cycles done, 8 of 8 hosts busy, efficiency
/// 91%` for a job publishing WoDi's attributes; `None` for any other job.
pub fn wodi_line(attrs: &[(String, String)]) -> Option<String> {
    let get = |name: &str| {
        (attrs.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let num = |name: &str| get(name).and_then(|v| v.parse::<f64>().ok());
    let hosts = num("WodiHosts")?;
    let mut parts = Vec::new();
    match (
        get("WodiCycle"),
        num("WodiCycleDelivered"),
        num("WodiCycleLeft"),
    ) {
        (Some(cycle), Some(done), Some(left)) => {
            parts.push(format!("cycle {cycle}: {done} of {} steps", done + left))
        }
        _ => parts.push("no cycle yet".to_string()),
    }
    if let Some(done) = num("WodiCyclesDone") {
        parts.push(format!("{done} cycles done"));
    }
    let busy = num("WodiBusy").unwrap_or(0.0);
    parts.push(format!("{busy} of {hosts} hosts busy"));
    if let Some(s) = num("WodiSuspended").filter(|s| *s > 0.0) {
        parts.push(format!("{s} suspended"));
    }
    if let Some(e) = num("WodiEfficiency") {
        parts.push(format!("efficiency {:.0}%", 100.0 * e));
    }
    Some(format!("WoDi {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_wodi_run_reads_as_one_line_and_other_jobs_as_none() {
        let a = attrs(&[
            ("WodiHosts", "8"),
            ("WodiBusy", "7"),
            ("WodiSuspended", "1"),
            ("WodiCycle", "3"),
            ("WodiCycleDelivered", "12"),
            ("WodiCycleLeft", "19"),
            ("WodiCyclesDone", "3"),
            ("WodiEfficiency", "0.912"),
        ]);
        assert_eq!(
            wodi_line(&a).unwrap(),
            "WoDi cycle 3: 12 of 31 steps, 3 cycles done, 7 of 8 hosts busy, 1 suspended, efficiency 91%"
        );
        let early = attrs(&[("WodiHosts", "0"), ("WodiBusy", "0")]);
        assert_eq!(
            wodi_line(&early).unwrap(),
            "WoDi no cycle yet, 0 of 0 hosts busy"
        );
        assert_eq!(wodi_line(&attrs(&[("Phase", "\"x\"")])), None);
    }
}
