use super::*;

const EXAMPLE: &str = r#"
# a job with two classes
executable    = ./master
arguments     = "--cycles 35 --tag 'run $(Cluster)'"
output        = out/master.$(Cluster).out
error         = out/master.err
transfer_input_files = params.json, data.bin

class_name    = fast
requirements  = Arch == "X86_64" && \
                Memory >= 2048
rank          = KFlops
machine_count = 2..10
queue

class_name    = slow
requirements  = Arch == "AARCH64"
machine_count = 0..4
queue
"#;

fn errors(text: &str) -> Vec<(usize, String)> {
    match parse("job.sub", text) {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(SubmitErrors(es)) => {
            for e in &es {
                assert_eq!(e.file, "job.sub");
            }
            es.into_iter().map(|e| (e.line, e.reason)).collect()
        }
    }
}

fn one_error(text: &str) -> (usize, String) {
    let es = errors(text);
    assert_eq!(es.len(), 1, "{es:?}");
    es.into_iter().next().unwrap()
}

#[test]
fn the_issue_example_parses() {
    let spec = parse("job.sub", EXAMPLE).unwrap();
    assert_eq!(spec.executable, "./master");
    assert_eq!(
        spec.arguments,
        vec!["--cycles", "35", "--tag", "run $(Cluster)"]
    );
    assert_eq!(spec.transfer_input_files, vec!["params.json", "data.bin"]);
    assert_eq!(spec.classes.len(), 2);
    let fast = &spec.classes[0];
    assert_eq!(fast.name, "fast");
    assert_eq!(fast.requirements, "Arch == \"X86_64\" && Memory >= 2048");
    assert_eq!(fast.rank.as_deref(), Some("KFlops"));
    assert_eq!((fast.min, fast.max, fast.line), (2, 10, 14));
    let slow = &spec.classes[1];
    assert_eq!((slow.name.as_str(), slow.min, slow.max), ("slow", 0, 4));
    assert_eq!(slow.rank, None);
    let x = spec.expand(42);
    assert_eq!(x.arguments[3], "run 42");
    assert_eq!(x.output.as_deref(), Some("out/master.42.out"));
}

#[test]
fn defaults_single_count_and_case_insensitive_keys() {
    let spec = parse(
        "f",
        "Executable = m\nMACHINE_COUNT = 3\nqueue\nqueue\nenvironment = A=1;B=x C=$(Cluster)\n",
    )
    .unwrap();
    assert_eq!(spec.classes.len(), 2);
    assert_eq!(spec.classes[0].name, "class0");
    assert_eq!((spec.classes[0].min, spec.classes[0].max), (3, 3));
    // Class keys are reset by queue.
    assert_eq!(spec.classes[1].name, "class1");
    assert_eq!((spec.classes[1].min, spec.classes[1].max), (1, 1));
    assert_eq!(spec.classes[1].requirements, "true");
    let env: Vec<(&str, &str)> = spec
        .environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    // HTCondor's old syntax: `;` separates, spaces belong to the value.
    assert_eq!(env, [("A", "1"), ("B", "x C=$(Cluster)")]);
    assert_eq!(spec.expand(7).environment[1].1, "x C=7");
}

#[test]
fn a_refused_command_is_reported_with_its_line_and_reason() {
    let (line, reason) = one_error("executable = m\n\ndocker_image = debian\nqueue\n");
    assert_eq!(line, 3);
    assert!(
        reason.starts_with("docker_image: containers are not run"),
        "{reason}"
    );
    // A key that is no command is a user macro, as in HTCondor.
    assert!(parse("j", "executable = m\nmy_setting = 1\nqueue\n").is_ok());
}

#[test]
fn bad_expression_is_reported_with_its_line() {
    let (line, reason) = one_error("executable = m\nrequirements = Memory >= \nqueue\n");
    assert_eq!(line, 2);
    assert!(
        reason.starts_with("requirements: not a ClassAd expression"),
        "{reason}"
    );
    let (line, reason) = one_error("executable = m\nqueue\n# x\nrank = (KFlops\nqueue\n");
    assert_eq!(line, 4);
    assert!(reason.starts_with("rank:"), "{reason}");
}

#[test]
fn machine_count_mistakes() {
    let (line, reason) = one_error("executable = m\nmachine_count = 5..2\nqueue\n");
    assert_eq!(line, 2);
    assert!(
        reason.contains("minimum 5 is above the maximum 2"),
        "{reason}"
    );
    let (_, reason) = one_error("executable = m\nmachine_count = lots\nqueue\n");
    assert!(reason.contains("`lots` is not a whole number"), "{reason}");
    let (_, reason) = one_error("executable = m\nmachine_count = 0\nqueue\n");
    assert!(reason.contains("at least 1"), "{reason}");
}

#[test]
fn missing_executable_and_missing_queue() {
    let (line, reason) = one_error("class_name = a\nqueue\n");
    assert_eq!(line, 0);
    assert!(reason.contains("missing `executable"), "{reason}");
    let (line, reason) = one_error("executable = m\nmachine_count = 2\n");
    assert_eq!(line, 2);
    assert!(reason.contains("no `queue`"), "{reason}");
    let (line, reason) = one_error("executable = m\nqueue\nmachine_count = 2\n");
    assert_eq!(line, 3);
    assert!(reason.contains("after the last `queue`"), "{reason}");
}

#[test]
fn every_mistake_is_reported_in_line_order() {
    let es = errors(
        "machine_count = 1\nexecutable = m\nexecutable = n\ndocker_image = x\nqueue 3 in (a b)\nbroken line\n",
    );
    let lines: Vec<usize> = es.iter().map(|e| e.0).collect();
    assert_eq!(lines, [3, 4, 5, 6], "{es:?}");
    assert!(es[0].1.contains("set twice (first on line 2)"));
    assert!(es[1].1.contains("containers"));
    assert!(es[2].1.contains("only `queue` and `queue N`"));
    assert!(es[3].1.contains("neither `key = value`"));
}

#[test]
fn duplicate_class_names_and_bad_names() {
    let (line, reason) =
        one_error("executable = m\nclass_name = a\nqueue\nclass_name = a\nqueue\n");
    assert_eq!(line, 5);
    assert!(
        reason.contains("already defined by the queue on line 3"),
        "{reason}"
    );
    let (line, _) = one_error("executable = m\nclass_name = a b\nqueue\n");
    assert_eq!(line, 2);
}

#[test]
fn continuation_lines_keep_the_first_line_number() {
    let (line, _) =
        one_error("executable = m\narguments = a \\\n  b\ndocker_image \\\n = 1\nqueue\n");
    assert_eq!(line, 4);
    let spec = parse(
        "f",
        "executable = m\narguments = \"a \\\n  'b c'\"\nqueue\n",
    )
    .unwrap();
    assert_eq!(spec.arguments, ["a", "b c"]);
}

#[test]
fn error_display_names_file_and_line() {
    let e = parse("dir/job.sub", "executable = m\nvm_type = kvm\nqueue\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("dir/job.sub:2: vm_type: virtual machines"),
        "{e}"
    );
}

#[test]
fn machine_count_above_its_limit_is_refused_with_the_limit_named() {
    let (line, reason) = one_error("executable = m\nmachine_count = 4294967295\nqueue\n");
    assert_eq!(line, 2);
    assert_eq!(
        reason,
        "machine_count: 4294967295 is above the limit of 100000 machines per class"
    );
    let (_, reason) = one_error("executable = m\nmachine_count = 0..100001\nqueue\n");
    assert!(
        reason.contains("100001 is above the limit of 100000"),
        "{reason}"
    );
    assert!(parse("j", "executable = m\nmachine_count = 100000\nqueue\n").is_ok());
}

#[test]
fn minimums_above_the_job_limit_are_refused() {
    let text = "executable = m\nmachine_count = 60000\nqueue\nmachine_count = 60000\nqueue\n";
    let (line, reason) = one_error(text);
    assert_eq!(line, 5);
    assert!(
        reason.contains("120000 is above the limit of 100000 machines per job"),
        "{reason}"
    );
}

#[test]
fn a_ten_megabyte_arguments_line_is_refused_with_the_exec_limit() {
    let text = format!(
        "executable = m\narguments = {}\nqueue\n",
        "x".repeat(10 << 20)
    );
    let (line, reason) = one_error(&text);
    assert_eq!(line, 2);
    assert_eq!(
        reason,
        "arguments (argument 1): 10485760 bytes is above the limit of 131071 bytes per argument (Linux's MAX_ARG_STRLEN)"
    );
    // Many short arguments: the total is what `exec` refuses.
    let text = format!(
        "executable = m\narguments = {}\nqueue\n",
        ("x".repeat(39) + " ").repeat(30_000)
    );
    let (line, reason) = one_error(&text);
    assert_eq!(line, 2);
    assert!(
        reason.starts_with(
            "arguments and environment: 1200000 bytes is above the limit of 1048576 bytes in all"
        ),
        "{reason}"
    );
}

#[test]
fn environment_paths_and_expressions_have_limits() {
    let (line, reason) = one_error(&format!(
        "executable = m\nenvironment = A={}\nqueue\n",
        "b".repeat(200_000)
    ));
    assert_eq!(line, 2);
    assert!(
        reason.starts_with("environment (A): 200002 bytes is above"),
        "{reason}"
    );
    let (line, reason) = one_error(&format!("executable = {}\nqueue\n", "p".repeat(5000)));
    assert_eq!(
        (line, reason.as_str()),
        (1, "executable: 5000 bytes is above the limit of 4095 bytes")
    );
    let (line, reason) = one_error(&format!(
        "executable = m\noutput = {}\nqueue\n",
        "p".repeat(5000)
    ));
    assert_eq!(line, 2);
    assert!(reason.starts_with("output: 5000 bytes"), "{reason}");
    let (line, reason) = one_error(&format!(
        "executable = m\nrequirements = {}\nqueue\n",
        "1+".repeat(10_000) + "1"
    ));
    assert_eq!(line, 2);
    assert_eq!(
        reason,
        "requirements: 20001 bytes is above the limit of 16384 bytes"
    );
    let (_, reason) = one_error(&format!(
        "executable = m\nclass_name = {}\nqueue\n",
        "c".repeat(300)
    ));
    assert_eq!(
        reason,
        "class_name: 300 bytes is above the limit of 255 bytes"
    );
    let files = vec!["f"; 1001].join(",");
    let (_, reason) = one_error(&format!(
        "executable = m\ntransfer_input_files = {files}\nqueue\n"
    ));
    assert_eq!(
        reason,
        "transfer_input_files: 1001 files is above the limit of 1000 files"
    );
}

#[test]
fn classes_beyond_the_limit_are_refused_once_and_not_kept() {
    // `machine_count`: a CARMI file, whose `queue`s close classes.
    let head = "executable = m\nmachine_count = 1\n";
    let text = format!("{head}{}", "queue\n".repeat(100_000));
    let (line, reason) = one_error(&text);
    assert_eq!(line, 3 + 64);
    assert_eq!(reason, "queue: 65 classes is above the limit of 64 classes");
    assert!(parse("j", &format!("{head}{}", "queue\n".repeat(64))).is_ok());
}

#[test]
fn a_file_above_the_size_limit_is_refused_whole_and_mistakes_are_capped() {
    let text = "#".repeat(crate::limits::MAX_SUBMIT_FILE_BYTES + 1);
    let (line, reason) = one_error(&text);
    assert_eq!(line, 0);
    assert_eq!(
        reason,
        "the file: 16777217 bytes is above the limit of 16777216 bytes"
    );
    // A CARMI file reports every mistake; an HTCondor one its first.
    let es = errors(&format!("machine_count = 1\n{}", "nonsense\n".repeat(1000)));
    assert_eq!(es.len(), 51);
    assert_eq!(es[50], (0, "and 952 more mistakes".to_string()));
    // Beyond what is kept, mistakes are still counted.
    let es = errors(&format!(
        "machine_count = 1\n{}",
        "nonsense\n".repeat(100_000)
    ));
    assert_eq!(es.len(), 51);
    assert_eq!(es[50], (0, "and 99952 more mistakes".to_string()));
}

#[test]
fn expressions_of_all_classes_together_have_a_limit() {
    // A wide list: one level deep, 8,003 bytes.
    let class = format!("requirements = {{{}1}}\nqueue\n", "1,".repeat(4_000));
    let head = "executable = m\nmachine_count = 1\n";
    let text = format!("{head}{}", class.repeat(9));
    let (line, reason) = one_error(&text);
    // The line of the last `queue`.
    assert_eq!(line, 20);
    assert_eq!(
        reason,
        "requirements and rank of all classes: 72027 bytes is above the limit of 65536 bytes per job"
    );
    assert!(parse("j", &format!("{head}{}", class.repeat(8))).is_ok());
}

/// A submit file in the style of the HTCondor manual's examples.
const CONDOR_STYLE: &str = r#"
# A vanilla-universe job, as HTCondor users write it.
universe                = vanilla
executable              = analyze.sh
arguments               = $(Cluster) $(Process)
initialdir              = run
log                     = analyze.log
output                  = analyze.$(Process).out
error                   = analyze.$(Process).err
should_transfer_files   = YES
when_to_transfer_output = ON_EXIT
transfer_input_files    = data.csv
transfer_output_files   = summary.txt
request_cpus            = 2
request_memory          = 1GB
request_disk            = 100MB
requirements            = OpSys == "LINUX"
+Department             = "physics"
JobBatchName            = sweep
queue 3
"#;

#[test]
fn an_htcondor_style_vanilla_job_parses_with_each_command_meant() {
    let spec = parse("job.sub", CONDOR_STYLE).unwrap();
    assert_eq!(spec.count, 3);
    assert_eq!(spec.classes.len(), 1);
    assert_eq!(
        spec.classes[0].requirements,
        "(OpSys == \"LINUX\") && Cpus >= 2 && Memory >= 1024 && Disk >= 102400"
    );
    assert_eq!(spec.initial_dir.as_deref(), Some("run"));
    assert_eq!(spec.log.as_deref(), Some("analyze.log"));
    assert_eq!(spec.transfer_output_files, ["summary.txt"]);
    assert_eq!(spec.transfer_input_files, ["data.csv"]);
    let attrs: Vec<(&str, &str)> = spec
        .attributes
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        attrs,
        [
            ("RequestCpus", "2"),
            ("RequestMemory", "1024"),
            ("RequestDisk", "102400"),
            ("Department", "\"physics\""),
            ("JobBatchName", "\"sweep\""),
        ]
    );
    let requests = spec.requests();
    assert_eq!(
        (requests.memory_mib, requests.cpus),
        (Some(1024), Some(2)),
        "the requests the local RM binds each process to"
    );
    // `queue N` copies a one-class job; with several classes it is a mistake.
    let (line, reason) =
        one_error("executable = m\nclass_name = a\nqueue\nclass_name = b\nqueue 2\n");
    assert_eq!(line, 5);
    assert!(reason.contains("this file has 2 classes"), "{reason}");
    let (_, reason) = one_error("executable = m\nuniverse = grid\nqueue\n");
    assert!(reason.contains("only the vanilla universe"), "{reason}");
    let (_, reason) = one_error("executable = m\nqueue 0\n");
    assert!(reason.contains("between 1 and 10000"), "{reason}");
}

#[test]
fn master_requirements_is_a_checked_expression() {
    let spec = parse(
        "job.sub",
        "executable = m\nmaster_requirements = Memory >= 2048 && OpSys == \"LINUX\"\nqueue\n",
    )
    .unwrap();
    assert_eq!(
        spec.master_requirements.as_deref(),
        Some("Memory >= 2048 && OpSys == \"LINUX\"")
    );
    assert_eq!(
        parse("job.sub", "executable = m\nqueue\n")
            .unwrap()
            .master_requirements,
        None
    );
    let (line, reason) = one_error("executable = m\nmaster_requirements = Memory >=\nqueue\n");
    assert_eq!(line, 2);
    assert!(
        reason.contains("master_requirements: not a ClassAd expression"),
        "{reason}"
    );
    let long = format!(
        "executable = m\nmaster_requirements = {}\nqueue\n",
        "x".repeat(20_000)
    );
    let (line, reason) = one_error(&long);
    assert_eq!(line, 2);
    assert!(reason.contains("master_requirements"), "{reason}");
}

#[test]
fn on_impossible_is_wait_hold_or_reject() {
    let spec = |v: &str| {
        parse(
            "j",
            &format!("executable = m\non_impossible = {v}\nqueue\n"),
        )
    };
    assert_eq!(
        parse("j", "executable = m\nqueue\n").unwrap().on_impossible,
        OnImpossible::Wait
    );
    assert_eq!(spec("hold").unwrap().on_impossible, OnImpossible::Hold);
    assert_eq!(spec("REJECT").unwrap().on_impossible, OnImpossible::Reject);
    assert_eq!(spec("wait").unwrap().on_impossible, OnImpossible::Wait);
    let e = spec("later").unwrap_err();
    assert_eq!(e.0[0].line, 2);
    assert_eq!(
        e.0[0].reason,
        "on_impossible = later: use wait, hold or reject"
    );
}

#[test]
fn expand_fills_the_cluster_id_wherever_values_are_expanded_and_nothing_else() {
    let spec = parse(
        "j",
        "executable = m\narguments = $(ClusterId) $$(Memory)\nlog = l.$(Cluster)\n+Tag = \"c$(ClusterId)\"\ntransfer_input_files = in.$(Cluster)\ntransfer_output_files = out.$(ClusterId)\nqueue\n",
    )
    .unwrap();
    let x = spec.expand(9);
    assert_eq!(x.arguments, ["9", "$$(Memory)"]);
    assert_eq!(x.log.as_deref(), Some("l.9"));
    assert!(x.attributes.contains(&("Tag".into(), "\"c9\"".into())));
    assert_eq!(x.transfer_input_files, ["in.9"]);
    assert_eq!(x.transfer_output_files, ["out.9"]);
    assert_eq!(x.executable, "m");
}
