//! Tests of the local RM's settings: command line, config file, policy.

use super::*;
use clap::Parser;

#[test]
fn attr_arguments_parse_as_expressions() {
    let (n, e) = parse_attr_arg("HasMatlab=true").unwrap();
    assert_eq!(n, "HasMatlab");
    assert_eq!(e.to_string(), "true");
    let (n, e) = parse_attr_arg(" Speed = Mips * 2").unwrap();
    assert_eq!(n, "Speed");
    assert_eq!(e.to_string(), "Mips * 2");
    // `=` inside the value belongs to the expression.
    let (_, e) = parse_attr_arg("Same=a == b").unwrap();
    assert_eq!(e.to_string(), "a == b");
}

#[test]
fn bad_attr_arguments_name_the_attribute_and_position() {
    let err = parse_attr_arg("Fast=Mips >= ").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`Fast`"), "{msg}");
    assert!(msg.contains("--attr"), "{msg}");
    assert!(msg.contains("line 1, column"), "{msg}");
    let ConfigError::BadExpression { error, .. } = err else {
        panic!("expected a syntax error");
    };
    assert_eq!(error.line, 1);
    assert!(error.column >= 8, "column {}", error.column);

    let msg = parse_attr_arg("NoValue").unwrap_err().to_string();
    assert!(msg.contains("NAME=VALUE"), "{msg}");
    let msg = parse_attr_arg("9lives=1").unwrap_err().to_string();
    assert!(msg.contains("`9lives`"), "{msg}");
}

#[test]
fn config_file_attributes_and_settings() {
    let f = parse_config(
        r#"
        slots = 3
        kill_grace_ms = 500
        cgroups = false
        [attributes]
        Owner = '"alice"'
        HasMatlab = true
        Weight = 2.5
        Rank = 'TARGET.Owner == "alice" ? 10 : 0'
        "#,
    )
    .unwrap();
    assert_eq!((f.slots, f.cgroups), (Some(3), Some(false)));
    let attrs: Vec<_> = f
        .attributes
        .iter()
        .map(|(n, v)| table_attribute(n, v, "test").unwrap())
        .collect();
    let text: Vec<String> = attrs.iter().map(|(n, e)| format!("{n}={e}")).collect();
    assert!(text.contains(&r#"Owner="alice""#.to_string()), "{text:?}");
    assert!(text.contains(&"HasMatlab=true".to_string()), "{text:?}");
    assert!(text.contains(&"Weight=2.5".to_string()), "{text:?}");
    assert!(parse_config("slotz = 3").is_err());
}

#[test]
fn config_file_errors_name_the_file_and_attribute() {
    let dir = crate::test_dir::TempDir::new("config");
    let path = dir.path().join("local.toml");
    std::fs::write(&path, "[attributes]\nFast = 'Mips >'\n").unwrap();
    let cli = Cli::try_parse_from([
        "carmi-local",
        "--global",
        "127.0.0.1:1",
        "--secret",
        "/nonexistent",
        "--config",
        path.to_str().unwrap(),
    ])
    .unwrap();
    let msg = Settings::from_cli(&cli).unwrap_err().to_string();
    assert!(msg.contains("`Fast`"), "{msg}");
    assert!(msg.contains("local.toml"), "{msg}");
    assert!(msg.contains("column"), "{msg}");
}

#[test]
fn policy_and_owner_tables() {
    let f = parse_config(
        r#"
        [policy]
        minute = 0.05
        start = "KeyboardIdle > 2 * Minute"
        continue = "true"
        vacate_grace = 3.0
        [owner]
        source = "simulated"
        "#,
    )
    .unwrap();
    assert_eq!(f.owner.source, Some(OwnerSource::Simulated));
    let mut p = PolicyConfig::default();
    apply_policy(&mut p, &f.policy, "test").unwrap();
    assert_eq!(p.minute, 0.05);
    assert_eq!(p.vacate_grace, 3.0);
    assert_eq!(p.start.to_string(), "KeyboardIdle > 2 * Minute");
    assert_eq!(p.continue_.to_string(), "true");
    assert!(parse_config("[owner]\nsource = \"imaginary\"\n").is_err());
    assert!(parse_config("[policy]\nstrat = \"true\"\n").is_err());
    let bad = parse_config("[policy]\nkill = \"Activity ==\"\n").unwrap();
    let msg = apply_policy(&mut p, &bad.policy, "file x")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("policy.kill") && msg.contains("file x"),
        "{msg}"
    );
    let zero = parse_config("[policy]\nminute = 0.0\n").unwrap();
    assert!(apply_policy(&mut p, &zero.policy, "x").is_err());
}

#[test]
fn command_line_overrides_the_file() {
    let dir = crate::test_dir::TempDir::new("config2");
    let path = dir.path().join("local.toml");
    std::fs::write(
        &path,
        "name = \"from-file\"\nslots = 3\ngpus = 4\nstage_listen = \"0.0.0.0:9622\"\n\
         stage_advertise = \"file:9622\"\n[attributes]\nA = 1\n",
    )
    .unwrap();
    let cli = Cli::try_parse_from([
        "carmi-local",
        "--global",
        "127.0.0.1:1",
        "--secret",
        "s",
        "--config",
        path.to_str().unwrap(),
        "--slots",
        "2",
        "--attr",
        "A=2",
        "--stage-advertise",
        "cli:9622",
    ])
    .unwrap();
    let s = Settings::from_cli(&cli).unwrap();
    assert_eq!(s.name, "from-file");
    // Staging settings from the file, the command line winning.
    assert_eq!(s.stage_listen.as_deref(), Some("0.0.0.0:9622"));
    assert_eq!(s.stage_advertise.as_deref(), Some("cli:9622"));
    assert_eq!(s.slots, Some(2));
    assert_eq!(s.gpus, Some(4));
    assert!(
        s.work_dir.ends_with("from-file"),
        "{}",
        s.work_dir.display()
    );
    assert!(s.secret_file.is_absolute());
    let a: Vec<String> = s.attributes.iter().map(|(_, e)| e.to_string()).collect();
    assert_eq!(a, ["1", "2"]);
    let cli = Cli::try_parse_from([
        "carmi-local",
        "--global",
        "x:1",
        "--secret",
        "s",
        "--slots",
        "0",
    ])
    .unwrap();
    // A submit machine: no slots, still a local RM for applications.
    let s = Settings::from_cli(&cli).unwrap();
    assert_eq!((s.slots, s.gpus), (Some(0), None));
    let with = |gpus: &str| {
        let args = [
            "carmi-local",
            "--global",
            "x:1",
            "--secret",
            "s",
            "--gpus",
            gpus,
        ];
        Cli::try_parse_from(args).map(|cli| Settings::from_cli(&cli).unwrap().gpus)
    };
    assert_eq!(with("2").unwrap(), Some(2));
    assert!(with("-1").is_err());
    let cli = Cli::try_parse_from([
        "carmi-local",
        "--global",
        "x:1",
        "--secret",
        "s",
        "--name",
        " ",
    ])
    .unwrap();
    assert!(Settings::from_cli(&cli).is_err());
}

#[test]
fn slot_users_come_from_a_list_a_prefix_or_none() {
    use crate::isolation::AccountsConfig;
    let accounts = |extra: &[&str], file: Option<&str>| {
        let dir = crate::test_dir::TempDir::new("cfg-slot-users");
        let path = dir.path().join("local.toml");
        std::fs::write(&path, file.unwrap_or("")).unwrap();
        let mut args = vec!["carmi-local", "--global", "x:1", "--secret", "s"];
        args.extend(["--config", path.to_str().unwrap()]);
        args.extend(extra);
        Settings::from_cli(&Cli::try_parse_from(args).unwrap())
            .unwrap()
            .accounts
    };
    assert_eq!(accounts(&[], None), AccountsConfig::Default);
    assert_eq!(
        accounts(&["--slot-users", "s1, s2"], None),
        AccountsConfig::Users(vec!["s1".into(), "s2".into()])
    );
    assert_eq!(
        accounts(&["--slot-users", "none"], None),
        AccountsConfig::Own
    );
    assert_eq!(
        accounts(&[], Some("slot_user_prefix = \"job\"\n")),
        AccountsConfig::Prefix("job".into())
    );
    assert_eq!(
        accounts(&[], Some("slot_users = []\n")),
        AccountsConfig::Own
    );
    // The command line wins over the file.
    assert_eq!(
        accounts(&["--slot-users", "a"], Some("slot_users = []\n")),
        AccountsConfig::Users(vec!["a".into()])
    );
    // An embedded pool's settings run jobs as its own user.
    assert_eq!(Settings::new("x:1", "s").accounts, AccountsConfig::Own);
}

#[test]
fn removing_slot_users_needs_no_pool_and_finds_the_prefix() {
    let dir = crate::test_dir::TempDir::new("cfg-remove-slot-users");
    let path = dir.path().join("local.toml");
    std::fs::write(&path, "slot_user_prefix = \"lab\"\n").unwrap();
    let prefix = |args: &[&str]| {
        let cli =
            Cli::try_parse_from(["carmi-local", "--remove-slot-users"].iter().chain(args)).unwrap();
        assert!(cli.remove_slot_users);
        Settings::removal_prefix(&cli).unwrap()
    };
    assert_eq!(prefix(&[]), crate::isolation::DEFAULT_PREFIX);
    assert_eq!(prefix(&["--config", path.to_str().unwrap()]), "lab");
    assert_eq!(
        prefix(&[
            "--config",
            path.to_str().unwrap(),
            "--slot-user-prefix",
            "x"
        ]),
        "x"
    );
    // Without it, the daemon still needs its global RM and secret.
    assert!(Cli::try_parse_from(["carmi-local", "--secret", "s"]).is_err());
    assert!(Cli::try_parse_from(["carmi-local", "--global", "x:1"]).is_err());
    assert!(
        Cli::try_parse_from(["carmi-local", "--remove-slot-users", "--slot-users", "a"]).is_err()
    );
}
