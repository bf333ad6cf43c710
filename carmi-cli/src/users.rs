//! The users part of `carmi q`: each user's fair-share priority and recent
//! usage (issue 15, item 7), so that a user can see why another user's job
//! grows before theirs. A job's user is its accounting group when it names
//! one (`physics.alice`), else its owner.

use std::collections::BTreeMap;

use carmi_api::msg::JobStatus;

/// One line per user of a listed job (priority, usage, hosts and jobs),
/// best priority first; empty when no job carries a priority (an older
/// global RM).
pub fn users_text(jobs: &[JobStatus]) -> String {
    // user -> (priority, usage, hosts held, jobs, factor)
    let mut users: BTreeMap<&str, (f64, f64, u32, u32, f64)> = BTreeMap::new();
    for j in jobs {
        let Some(u) = &j.user else { continue };
        let name = u.name.as_deref().unwrap_or(&j.owner);
        let e = users
            .entry(name)
            .or_insert((u.priority, u.usage_hours, 0, 0, u.factor));
        e.2 += j.classes.iter().map(|c| c.held).sum::<u32>();
        e.3 += 1;
    }
    if users.is_empty() {
        return String::new();
    }
    let mut rows: Vec<_> = users.into_iter().collect();
    rows.sort_by(|a, b| a.1.0.total_cmp(&b.1.0).then(a.0.cmp(b.0)));
    // Wide enough for accounting groups (`physics.alice`), within reason.
    let w = rows
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(10, 32);
    let mut out = format!(
        "\n{:<w$} {:>9} {:>12} {:>6} {:>5} {:>7}\n",
        "USER", "PRIORITY", "HOST-HOURS", "HOSTS", "JOBS", "FACTOR"
    );
    for (name, (prio, usage, hosts, n, factor)) in rows {
        let name: String = name.chars().take(w).collect();
        out.push_str(&format!(
            "{name:<w$} {prio:>9.2} {usage:>12.2} {hosts:>6} {n:>5} {factor:>7.2}\n"
        ));
    }
    out.push_str("(lower priority is better: factor x (1 + usage in host-hours); usage halves every half-life)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::JobId;
    use carmi_api::msg::{ClassStatus, UserShare};

    fn job(id: u64, owner: &str, held: u32, priority: f64) -> JobStatus {
        JobStatus {
            job: JobId(id),
            cluster: None,
            proc: 0,
            owner: owner.into(),
            submitted_unix: 0,
            state: "running".into(),
            executable: "m".into(),
            master: None,
            classes: vec![ClassStatus {
                name: "w".into(),
                requirements: "true".into(),
                rank: None,
                held,
                min: 1,
                max: 9,
            }],
            note: None,
            user: Some(UserShare {
                priority,
                usage_hours: priority - 1.0,
                factor: 1.0,
                name: None,
            }),
            attrs: Vec::new(),
        }
    }

    #[test]
    fn users_are_listed_best_priority_first_with_their_hosts_and_jobs() {
        let jobs = [
            job(1, "alice", 3, 4.5),
            job(2, "alice", 2, 4.5),
            job(3, "bob", 5, 1.25),
        ];
        let text = users_text(&jobs);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("USER"), "{text}");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["bob", "1.25", "0.25", "5", "1", "1.00"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["alice", "4.50", "3.50", "5", "2", "1.00"]
        );
        // A job charged to an accounting group is listed under the group.
        let mut grouped = job(5, "alice", 4, 2.0);
        grouped.user.as_mut().unwrap().name = Some("physics.alice".into());
        let text = users_text(&[job(1, "alice", 3, 4.5), grouped]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["physics.alice", "2.00", "1.00", "4", "1", "1.00"]
        );
        assert_eq!(lines[3].split_whitespace().next(), Some("alice"));
        let mut old = job(4, "carol", 1, 1.0);
        old.user = None;
        assert_eq!(users_text(&[old]), "");
    }
}
