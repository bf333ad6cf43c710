//! Unit tests of the client: thread-safety of the handles, environment parsing.

use super::*;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn handles_and_streams_move_between_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Carmi>();
    assert_send_sync::<EventStream>();
    assert_send_sync::<ConnectError>();
}

#[test]
fn environment_names_what_is_missing_or_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("pool.secret");
    std::fs::write(&secret, Secret::generate_text()).unwrap();
    let secret = secret.to_str().unwrap();

    let err = ConnectOptions::from_vars(vars(&[])).unwrap_err();
    assert!(err.to_string().contains("no pool local"), "{err}");
    assert!(err.to_string().contains("set CARMI_LOCAL"), "{err}");
    let err = ConnectOptions::from_vars(vars(&[("CARMI_LOCAL", "h:1")])).unwrap_err();
    assert!(err.to_string().contains("set CARMI_SECRET"), "{err}");
    let err = ConnectOptions::from_vars(vars(&[
        ("CARMI_LOCAL", "h:1"),
        ("CARMI_SECRET_FILE", "/nonexistent/secret"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/secret"), "{err}");
    let err = ConnectOptions::from_vars(vars(&[
        ("CARMI_LOCAL", "h:1"),
        ("CARMI_SECRET_FILE", secret),
        ("CARMI_PROCESS", "p4"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("CARMI_JOB is not set"), "{err}");
    let err = ConnectOptions::from_vars(vars(&[
        ("CARMI_LOCAL", "h:1"),
        ("CARMI_SECRET_FILE", secret),
        ("CARMI_JOB", "seven"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("CARMI_JOB=\"seven\""), "{err}");

    let first = ConnectOptions::from_vars(vars(&[
        ("CARMI_LOCAL", "h:1"),
        ("CARMI_SECRET_FILE", secret),
        ("CARMI_JOB", ""),
    ]))
    .unwrap();
    assert_eq!((first.job, first.process), (None, None));
    let started = ConnectOptions::from_vars(vars(&[
        ("CARMI_LOCAL", "h:1"),
        ("CARMI_SECRET_FILE", secret),
        ("CARMI_JOB", "j3"),
        ("CARMI_PROCESS", "12"),
        ("CARMI_ENDPOINT_HOST", "10.0.0.5"),
    ]))
    .unwrap();
    assert_eq!(started.local, "h:1");
    assert_eq!(started.job, Some(JobId(3)));
    assert_eq!(started.process, Some(ProcessId(12)));
    assert_eq!(started.endpoint_host.as_deref(), Some("10.0.0.5"));
}

#[test]
fn a_program_started_by_hand_finds_the_pool_as_carmi_does() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("pool.secret");
    std::fs::write(&secret, Secret::generate_text()).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("local = \"lab:9620\"\nsecret = \"{}\"\n", secret.display()),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_string();
    let from_file = ConnectOptions::from_vars(vars(&[("CARMI_CONFIG", &config)])).unwrap();
    assert_eq!(from_file.local, "lab:9620");
    // The environment still wins, as for `carmi`.
    let from_env = ConnectOptions::from_vars(vars(&[
        ("CARMI_CONFIG", &config),
        ("CARMI_LOCAL", "other:1"),
    ]))
    .unwrap();
    assert_eq!(from_env.local, "other:1");
    // A broken file is named, not skipped.
    std::fs::write(&config, "local = [").unwrap();
    let err = ConnectOptions::from_vars(vars(&[("CARMI_CONFIG", &config)])).unwrap_err();
    assert!(err.to_string().contains(&config), "{err}");
}

#[test]
fn plain_peers_comes_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("pool.secret");
    std::fs::write(&secret, Secret::generate_text()).unwrap();
    let secret = secret.to_str().unwrap();
    let with = |value: Option<&str>| {
        let mut pairs = vec![("CARMI_LOCAL", "h:1"), ("CARMI_SECRET_FILE", secret)];
        pairs.extend(value.map(|v| (ENV_PLAIN_PEERS, v)));
        ConnectOptions::from_vars(vars(&pairs))
    };
    assert!(!with(None).unwrap().plain_peers);
    assert!(with(Some("1")).unwrap().plain_peers);
    assert!(with(Some("yes")).unwrap().plain_peers);
    assert!(!with(Some("0")).unwrap().plain_peers);
    let err = with(Some("maybe")).unwrap_err();
    assert!(err.to_string().contains("CARMI_PLAIN_PEERS"), "{err}");
}
