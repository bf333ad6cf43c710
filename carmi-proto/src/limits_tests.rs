use super::*;
use crate::ids::HostId;
use crate::msg::{ExecutableRef, SpawnTarget};

fn spec(text: &str) -> JobSpec {
    crate::submit::parse("job.sub", text).expect("a valid submit file")
}

fn exe() -> ExecutableRef {
    ExecutableRef {
        name: "m".into(),
        sha256: "0".repeat(64),
        size: 10,
    }
}

fn submit(spec: JobSpec) -> SubmitRequest {
    SubmitRequest {
        owner: "alice".into(),
        machine: "m0".into(),
        executable: exe(),
        spec,
        submitted_unix: 0,
        anywhere: false,
        procs: Vec::new(),
        max_materialize: None,
        max_idle: None,
    }
}

#[test]
fn a_limit_error_names_the_field_the_value_and_the_limit() {
    let e = check_machine_count("machine_count", u32::MAX).unwrap_err();
    assert_eq!(
        e.to_string(),
        "machine_count: 4294967295 is above the limit of 100000 machines per class"
    );
    assert!(check_machine_count("machine_count", MAX_MACHINES_PER_CLASS).is_ok());
}

#[test]
fn a_received_spec_is_checked_like_a_parsed_one() {
    // A client that skips the parser: the spec is built by hand.
    let mut s = spec("executable = m\nqueue\n");
    assert!(check_submit(&submit(s.clone())).is_ok());
    s.classes[0].min = u32::MAX;
    s.classes[0].max = u32::MAX;
    let f = check_submit(&submit(s)).unwrap_err();
    assert_eq!(f.code, FailureCode::Invalid);
    assert!(
        f.message
            .contains("class `class0`: machine_count: 4294967295 is above the limit of 100000 machines per class"),
        "{}",
        f.message
    );
}

#[test]
fn minimums_add_up_over_classes() {
    let mut s = spec("executable = m\nmachine_count = 1\nqueue\nqueue\n");
    for c in &mut s.classes {
        c.min = MAX_MACHINES_PER_CLASS;
        c.max = MAX_MACHINES_PER_CLASS;
    }
    let f = check_submit(&submit(s)).unwrap_err();
    assert!(
        f.message
            .contains("machine_count (minimums of all classes): 200000 is above the limit of 100000 machines per job"),
        "{}",
        f.message
    );
}

#[test]
fn every_size_of_a_submit_request_is_checked() {
    let base = spec("executable = m\nqueue\n");
    type Change = Box<dyn Fn(&mut SubmitRequest)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|r| r.owner = "o".repeat(256)),
            "owner: 256 bytes is above the limit of 255 bytes",
        ),
        (
            Box::new(|r| r.machine = "o".repeat(256)),
            "machine: 256 bytes",
        ),
        (
            Box::new(|r| r.executable.size = 1 << 40),
            "executable size: 1099511627776 bytes is above",
        ),
        (
            Box::new(|r| r.executable.sha256 = "0".repeat(65)),
            "executable sha256: 65 bytes",
        ),
        (
            Box::new(|r| r.spec.executable = "x".repeat(5000)),
            "executable: 5000 bytes is above the limit of 4095 bytes",
        ),
        (
            Box::new(|r| r.spec.output = Some("x".repeat(5000))),
            "output: 5000 bytes",
        ),
        (
            Box::new(|r| r.spec.arguments = vec!["a".into(); MAX_ARGS + 1]),
            "arguments: 32769 arguments is above the limit of 32768 arguments",
        ),
        (
            Box::new(|r| r.spec.arguments = vec!["a".repeat(200_000)]),
            "arguments (argument 1): 200000 bytes is above the limit of 131071 bytes per argument",
        ),
        (
            Box::new(|r| r.spec.arguments = vec!["a".repeat(100_000); 11]),
            "arguments and environment: 1100011 bytes is above the limit of 1048576 bytes in all",
        ),
        (
            Box::new(|r| r.spec.environment = vec![("A".into(), "b".into()); MAX_ENV_VARS + 1]),
            "environment: 4097 variables",
        ),
        (
            Box::new(|r| r.spec.environment = vec![("A".into(), "b".repeat(200_000))]),
            "environment (A): 200002 bytes",
        ),
        (
            Box::new(|r| r.spec.transfer_input_files = vec!["f".into(); MAX_INPUT_FILES + 1]),
            "transfer_input_files: 1001 files",
        ),
        (
            Box::new(|r| r.spec.classes[0].requirements = "x".repeat(MAX_EXPRESSION_BYTES + 1)),
            "class `class0`: requirements: 16385 bytes",
        ),
        (
            Box::new(|r| r.spec.classes[0].rank = Some("x".repeat(MAX_EXPRESSION_BYTES + 1))),
            "class `class0`: rank: 16385 bytes",
        ),
        (
            Box::new(|r| r.spec.classes[0].name = "x".repeat(300)),
            "class_name: 300 bytes",
        ),
        (
            Box::new(|r| r.spec.classes = vec![r.spec.classes[0].clone(); MAX_CLASSES_PER_JOB + 1]),
            "queue: 65 classes is above the limit of 64 classes",
        ),
    ];
    for (change, want) in cases {
        let mut r = submit(base.clone());
        change(&mut r);
        let f = check_submit(&r).unwrap_err();
        assert!(f.message.contains(want), "want {want:?} in {:?}", f.message);
    }
}

#[test]
fn application_requests_are_checked() {
    let ok = Request::AddHosts {
        class: "w".into(),
        count: MAX_MACHINES_PER_CLASS,
        increment: 1,
    };
    assert!(check_request(&ok).is_ok());
    let cases = vec![
        (
            Request::AddHosts {
                class: "w".into(),
                count: u32::MAX,
                increment: 1,
            },
            "AddHosts count: 4294967295 is above the limit of 100000 machines per class",
        ),
        (
            Request::DelHosts {
                hosts: vec![HostId(1); MAX_HOSTS_PER_REQUEST + 1],
            },
            "DelHosts hosts: 100001 hosts",
        ),
        (
            Request::ClassSpawn {
                executable: exe(),
                args: vec!["a".repeat(MAX_ARG_BYTES + 1)],
                target: SpawnTarget::Class("w".into()),
                output: Default::default(),
            },
            "ClassSpawn args (argument 1): 131072 bytes",
        ),
        (
            Request::DefineClass {
                name: "w".into(),
                expression: "x".repeat(MAX_EXPRESSION_BYTES + 1),
                rank: None,
                replace: false,
            },
            "DefineClass expression: 16385 bytes",
        ),
        (
            Request::ExcludeHosts {
                class: "c".repeat(256),
                hosts: vec![],
            },
            "ExcludeHosts class: 256 bytes",
        ),
    ];
    for (req, want) in cases {
        let f = check_request(&req).unwrap_err();
        assert_eq!(f.code, FailureCode::Invalid);
        assert!(f.message.contains(want), "want {want:?} in {:?}", f.message);
    }
}

#[test]
fn long_reasons_are_cut_on_a_character_boundary() {
    assert_eq!(cut_reason("short"), "short");
    let long = "é".repeat(MAX_REASON_BYTES);
    let cut = cut_reason(&long);
    assert!(cut.len() < MAX_REASON_BYTES + 40, "{}", cut.len());
    assert!(cut.ends_with(&format!("... ({} bytes in all)", long.len())));
}

#[test]
fn ids_a_client_names_stay_far_from_the_end_of_the_counters() {
    assert!(check_id("job", MAX_ID).is_ok());
    assert_eq!(
        check_id("job", u64::MAX).unwrap_err().to_string(),
        "job: 18446744073709551615 is above the limit of 9007199254740992 (2^53)"
    );
}

#[test]
fn the_procs_of_a_cluster_are_counted_and_each_checked() {
    let one = spec("executable = m\nqueue\n");
    let mut req = submit(one.clone());
    req.procs = vec![one.clone(); MAX_JOBS_PER_SUBMIT as usize - 1];
    assert!(check_submit(&req).is_ok());
    req.procs.push(one.clone());
    let f = check_submit(&req).unwrap_err();
    assert!(
        f.message.contains("procs: 10001 is above the limit"),
        "{}",
        f.message
    );
    let mut bad = one.clone();
    bad.arguments = vec!["a".repeat(MAX_ARG_BYTES + 1)];
    req.procs = vec![one, bad];
    let f = check_submit(&req).unwrap_err();
    assert!(f.message.starts_with("proc 2: arguments"), "{}", f.message);
}
