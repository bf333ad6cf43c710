//! `carmi submit --dry-run`: the job ads a submit file would queue, in the
//! `Name = value` form of `condor_submit -dry-run` and `condor_q -l`, so a
//! user can check what the pool will see before anything is queued.

use carmi_api::msg::ExecutableRef;
use carmi_api::submit::{JobSpec, join_args, join_environment};

/// One ad per proc of the cluster, separated by blank lines. Arguments and
/// environment in HTCondor's new syntax; `$(ClusterId)` stays as text until
/// the global RM gives the cluster its id.
pub fn job_ads(procs: &[JobSpec], owner: &str, machine: &str, exe: &ExecutableRef) -> String {
    let mut out = String::with_capacity(procs.len() * 512);
    for (process, spec) in procs.iter().enumerate() {
        let mut lines: Vec<(String, String)> = vec![
            ("Owner".into(), quoted(owner)),
            ("ClusterId".into(), "undefined".into()),
            ("ProcId".into(), process.to_string()),
            ("Cmd".into(), quoted(&spec.executable)),
            ("Arguments".into(), quoted(&join_args(&spec.arguments))),
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
            lines.push((
                "Environment".into(),
                quoted(&join_environment(&spec.environment)),
            ));
        }
        lines.extend(spec.attributes.iter().cloned());
        if let [only] = spec.classes.as_slice() {
            lines.push(("Requirements".into(), only.requirements.clone()));
        }
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
            out.push_str(&name);
            out.push_str(" = ");
            out.push_str(&value);
            out.push('\n');
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

    #[test]
    fn one_ad_per_proc_with_its_arguments_environment_and_requirements() {
        let env = carmi_api::submit::FixedEnv::default();
        let cluster = carmi_api::submit::parse_cluster(
            "job.sub",
            "executable = m\narguments = \"$(ProcId) 'a b'\"\nenvironment = \"X=1 Y='p q'\"\nrequest_gpus = 1\nrequirements = Memory > 1\nqueue 3\n",
            &env,
        )
        .unwrap();
        let exe = ExecutableRef {
            name: "m".into(),
            sha256: "ab".repeat(32),
            size: 1,
        };
        let ads = job_ads(&cluster.procs, "alice", "laptop", &exe);
        assert_eq!(ads.matches("ProcId = ").count(), 3, "{ads}");
        assert!(ads.contains("ProcId = 2\n"), "{ads}");
        assert!(ads.contains("Arguments = \"2 'a b'\"\n"), "{ads}");
        assert!(ads.contains("Environment = \"X=1 'Y=p q'\"\n"), "{ads}");
        assert!(ads.contains("RequestGPUs = 1\n"), "{ads}");
        assert!(
            ads.contains("Requirements = (Memory > 1) && GPUs >= 1\n"),
            "{ads}"
        );
    }
}
