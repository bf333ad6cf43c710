//! `carmi join FILE` on real files: a user's bundle installs the secret and
//! the token (0600) and a `config.toml` that `carmi` then resolves with no
//! export; a bundle others may read is refused; a different file already in
//! the pool's directory is named and kept unless `--force`; a machine's
//! bundle with `--no-start` installs its files and prints the local RM's
//! command line.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `carmi ARGS` with `dir` as the pool's directory and no pool from the environment.
fn carmi(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_carmi"))
        .args(args)
        .env_remove("CARMI_SECRET")
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_TOKEN")
        .env_remove("CARMI_LOCAL")
        .env_remove("CARMI_CONFIG")
        .env("CARMI_DIR", dir)
        .env("HOME", dir.join("home"))
        .output()
        .unwrap()
}

fn bundle(path: &Path, kind: &str, name: &str, token: &str) {
    let text = format!(
        "kind = \"{kind}\"\nname = \"{name}\"\npool = \"manager:9618\"\n\
         secret = \"0123456789abcdef0123456789abcdef\"\ntoken = \"{token}\"\n"
    );
    carmi_api::files::write_private(path, &text, true).unwrap();
}

#[test]
fn a_users_bundle_installs_private_files_and_a_config_carmi_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("carmi");
    let file = tmp.path().join("alice.join");
    bundle(&file, "user", "alice", "t.alice.1");
    let out = carmi(&dir, &["join", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&dir.join("pool.secret")), 0o600);
    assert_eq!(mode(&dir.join("user.token")), 0o600);
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["pool"].as_str(), Some("manager:9618"));
    assert_eq!(
        config["token"].as_str(),
        Some(dir.join("user.token").to_str().unwrap())
    );
    // The same bundle again changes nothing and is no conflict.
    let out = carmi(&dir, &["join", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Another user's token in the same place: named, kept, unless --force.
    bundle(&file, "user", "alice", "t.alice.2");
    let out = carmi(&dir, &["join", file.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "replaced without --force");
    assert!(
        err.contains("user.token") && err.contains("--force"),
        "{err}"
    );
    assert!(
        std::fs::read_to_string(dir.join("user.token"))
            .unwrap()
            .contains("t.alice.1")
    );
    let out = carmi(&dir, &["join", "--force", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        std::fs::read_to_string(dir.join("user.token"))
            .unwrap()
            .contains("t.alice.2")
    );
    assert_eq!(mode(&dir.join("user.token")), 0o600);

    // A bundle others may read has leaked its secret: refused, saying how to fix it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = carmi(&dir, &["join", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_machines_bundle_installs_its_files_and_names_the_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("carmi");
    let file = tmp.path().join("lab7.join");
    bundle(&file, "machine", "lab7", "t.lab7.1");
    // A configuration naming another machine is refused: its token would be.
    let other = tmp.path().join("other.toml");
    std::fs::write(&other, "name = \"lab8\"\nslots = 2\n").unwrap();
    let out = carmi(
        &dir,
        &[
            "join",
            file.to_str().unwrap(),
            "--config",
            other.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("lab8"), "{}", text(&out.stderr));
    assert!(
        !dir.join("local.token").exists(),
        "a refused join wrote a file"
    );

    let mine = tmp.path().join("mine.toml");
    std::fs::write(&mine, "slots = 2\n\n[policy]\nstart = \"true\"\n").unwrap();
    let args = [
        "join",
        file.to_str().unwrap(),
        "--config",
        mine.to_str().unwrap(),
        "--no-start",
    ];
    let out = carmi(&dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&dir.join("local.token")), 0o600);
    assert_eq!(mode(&dir.join("pool.secret")), 0o600);
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("local.toml")).unwrap()).unwrap();
    assert_eq!(config["name"].as_str(), Some("lab7"));
    assert_eq!(config["slots"].as_integer(), Some(2));
    let env = std::fs::read_to_string(dir.join("local.env")).unwrap();
    assert!(env.contains("CARMI_GLOBAL=manager:9618"), "{env}");
    let line = text(&out.stdout);
    for part in [
        "carmi-local",
        "--global manager:9618",
        "--token",
        "local.token",
    ] {
        assert!(line.contains(part), "{line}");
    }
}
