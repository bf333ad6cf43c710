//! `carmi submit --dry-run`: the job ads a submit file would queue, in the
//! `Name = value` form of `condor_submit -dry-run` and `condor_q -l`, so a
//! user can check what the pool will see before anything is queued.

use carmi_api::msg::ExecutableRef;
use carmi_api::submit::JobSpec;

/// One ad per copy of the job, separated by blank lines.
pub fn job_ads(copies: &[JobSpec], owner: &str, machine: &str, exe: &ExecutableRef) -> String {
    let mut out = String::new();
    for (process, spec) in copies.iter().enumerate() {
        let mut lines: Vec<(String, String)> = vec![
            ("Owner".into(), quoted(owner)),
            ("ClusterId".into(), "undefined".into()),
            ("ProcId".into(), process.to_string()),
            ("Cmd".into(), quoted(&spec.executable)),
            ("Arguments".into(), quoted(&spec.arguments.join(" "))),
            ("MasterMachine".into(), quoted(machine)),
            ("ExecutableSha256".into(), quoted(&exe.sha256)),
        ];
        for (name, value) in [
            ("Iwd", &spec.initial_dir),
            ("Out", &spec.output),
            ("Err", &spec.error),
            ("UserLog", &spec.log),
        ] {
            if let Some(v) = value {
                lines.push((name.into(), quoted(v)));
            }
        }
        if !spec.transfer_input_files.is_empty() {
            lines.push((
                "TransferInput".into(),
                quoted(&spec.transfer_input_files.join(",")),
            ));
        }
        if !spec.transfer_output_files.is_empty() {
            lines.push((
                "TransferOutput".into(),
                quoted(&spec.transfer_output_files.join(",")),
            ));
        }
        if let Some(r) = &spec.master_requirements {
            lines.push(("MasterRequirements".into(), r.clone()));
        }
        if !spec.environment.is_empty() {
            let env: Vec<String> = spec
                .environment
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            lines.push(("Environment".into(), quoted(&env.join(" "))));
        }
        lines.extend(spec.attributes.iter().cloned());
        for c in &spec.classes {
            let prefix = format!("Class_{}_", c.name);
            lines.push((format!("{prefix}Requirements"), c.requirements.clone()));
            if let Some(rank) = &c.rank {
                lines.push((format!("{prefix}Rank"), rank.clone()));
            }
            lines.push((format!("{prefix}MinMachines"), c.min.to_string()));
            lines.push((format!("{prefix}MaxMachines"), c.max.to_string()));
        }
        for (name, value) in lines {
            out.push_str(&format!("{name} = {value}\n"));
        }
        out.push('\n');
    }
    out
}

/// A ClassAd string literal.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ad_shows_where_the_master_may_run_and_what_comes_back() {
        let spec = carmi_api::submit::parse(
            "job.sub",
            "executable = m\nmaster_requirements = Memory >= 2048\ntransfer_output_files = a.txt, b.txt\nqueue\n",
        )
        .unwrap();
        let exe = ExecutableRef {
            name: "m".into(),
            sha256: "ab".repeat(32),
            size: 1,
        };
        let ad = job_ads(&[spec], "alice", "laptop", &exe);
        assert!(ad.contains("MasterRequirements = Memory >= 2048\n"), "{ad}");
        assert!(ad.contains("TransferOutput = \"a.txt,b.txt\"\n"), "{ad}");
    }
}
