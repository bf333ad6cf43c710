//! `carmi pool up`, `carmi status` with no flags, `carmi pool down`, with the
//! configuration file in a temporary folder (a developer's own is never touched).

use std::path::{Path, PathBuf};
use std::process::Output;

/// The command with its configuration file, and its temporary directory
/// (where pool folders go), beside `config`.
fn carmi(config: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_carmi"));
    cmd.env_remove("CARMI_SECRET")
        .env_remove("CARMI_POOL")
        .env("CARMI_CONFIG", config)
        .env("XDG_STATE_HOME", state_of(config))
        .env("TMPDIR", tmp_of(config));
    cmd
}

/// Where `pool up` records its pool, beside (never in) the user's config.
fn state_of(config: &Path) -> PathBuf {
    config.parent().unwrap().join("state")
}

fn record_of(config: &Path) -> PathBuf {
    state_of(config).join("carmi/pool-up.toml")
}

fn tmp_of(config: &Path) -> PathBuf {
    let t = config.parent().unwrap().join("tmp");
    std::fs::create_dir_all(&t).unwrap();
    t
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A live (not zombie) process.
fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) && alive(name.parse().unwrap()) {
            found.push(format!("{name}: {cmd}"));
        }
    }
    found
}

#[test]
fn pool_up_status_and_down_leave_nothing_behind() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("carmi/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    // The user's own pool (nothing listens there): the running embedded
    // pool comes first, and the user's file is left as it was.
    let mine = "editor = \"vi\"\npool = \"127.0.0.1:1\"\n";
    std::fs::write(&config, mine).unwrap();

    let out = ok(carmi(&config)
        .args(["pool", "up", "--hosts", "16", "--seed", "5"])
        .output()
        .unwrap());
    let t: toml::Table = std::fs::read_to_string(record_of(&config))
        .unwrap()
        .parse()
        .unwrap();
    let pool = t["pool"].as_str().unwrap().to_string();
    let secret = PathBuf::from(t["secret"].as_str().unwrap());
    let local = t["local"].as_str().unwrap().to_string();
    let pid = t["pool_pid"].as_integer().unwrap();
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        mine,
        "the user's config file is never written"
    );
    // Every line says what it is: no bare address, the global RM's named.
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("pool up: 16 hosts; global RM {pool}, ")),
        "{out}"
    );
    assert!(
        out.lines()
            .all(|l| l.parse::<std::net::SocketAddr>().is_err()),
        "{out}"
    );
    assert!(secret.is_file());
    assert!(local.parse::<std::net::SocketAddr>().is_ok(), "{local}");
    assert!(alive(pid));
    let dir = secret.parent().unwrap().to_path_buf();
    assert_eq!(pool_dirs(&tmp_of(&config)), vec![dir.clone()]);

    let json = ok(carmi(&config).args(["status", "--json"]).output().unwrap());
    let machines: serde_json::Value = serde_json::from_str(&json).unwrap();
    let hosts: Vec<&str> = machines
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .filter(|n| n.starts_with("host"))
        .collect();
    assert_eq!(hosts.len(), 16, "{json}");
    let table = ok(carmi(&config).arg("status").output().unwrap());
    assert!(table.contains("host16"), "{table}");
    // The web dashboard is on, its address (with a read token) printed.
    let url = (out.lines())
        .find_map(|l| l.strip_prefix("dashboard: "))
        .unwrap_or_else(|| panic!("no dashboard line: {out}"));
    assert_eq!(t["dashboard"].as_str(), Some(url));
    let (addr, query) = (url.strip_prefix("https://"))
        .and_then(|u| u.split_once("/?"))
        .unwrap_or_else(|| panic!("not https://ADDR/?token=...: {url}"));
    // The page's address takes the token (into a cookie); the API takes it
    // in a header, never from its address.
    let token = query
        .strip_prefix("token=")
        .expect("a token in the address");
    let page = http_get(addr, &format!("/?{query}"));
    assert!(page.starts_with("HTTP/1.1 303"), "{page}");
    let req = format!(
        "GET /api/machines HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    let view = carmi_testkit::https(addr, &req);
    assert!(view.starts_with("HTTP/1.1 200"), "{view}");
    assert!(http_get(addr, &format!("/api/machines?{query}")).starts_with("HTTP/1.1 401"));
    assert!(view.contains("\"host16\""), "{view}");
    assert!(http_get(addr, "/api/machines").starts_with("HTTP/1.1 401"));
    assert!(table.contains("16 slots: 16 idle"), "{table}");

    // A second pool would fight the first over the recorded keys.
    let again = carmi(&config)
        .args(["pool", "up", "--hosts", "2"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already up"),
        "{}",
        text(&again.stderr)
    );

    ok(carmi(&config).args(["pool", "down"]).output().unwrap());
    assert!(!alive(pid), "the pool process {pid} still runs");
    assert!(!dir.exists(), "{} is left", dir.display());
    assert_eq!(
        processes_mentioning(&dir.display().to_string()),
        Vec::<String>::new()
    );
    assert!(!record_of(&config).exists(), "pool down leaves its record");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), mine);

    // Nothing recorded now: plain status and down say so.
    let out = carmi(&config).arg("status").output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("carmi pool up"),
        "{}",
        text(&out.stderr)
    );
    let out = carmi(&config).args(["pool", "down"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no pool is recorded"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn pool_up_refuses_bad_options_and_leaves_nothing() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let out = carmi(&config)
        .args(["pool", "up", "--hosts", "2", "--owners", "sometimes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("sometimes"),
        "{}",
        text(&out.stderr)
    );
    assert!(!config.exists());

    // A pool that fails to start shows why (from its log) and leaves nothing.
    let tmp = tmp_of(&config);
    let out = carmi(&config)
        .args(["pool", "up", "--hosts", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("hosts must be"),
        "{}",
        text(&out.stderr)
    );
    assert!(!config.exists());
    assert_eq!(pool_dirs(&tmp), Vec::<PathBuf>::new());
}

/// The pool folders under `tmp`.
fn pool_dirs(tmp: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("carmi-pool-"))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_churning_pool_changes_state_between_two_status_calls() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    ok(carmi(&config)
        .args(["pool", "up", "--hosts", "8", "--owners", "stochastic"])
        .args(["--speedup", "7200", "--seed", "1"])
        .output()
        .unwrap());
    let states = || {
        let json = ok(carmi(&config).args(["status", "--json"]).output().unwrap());
        let machines: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut v: Vec<(String, String)> = machines
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| {
                let name = m["name"].as_str().unwrap().to_string();
                m["slots"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |s| (name.clone(), s["state"].as_str().unwrap().to_string()))
            })
            .collect();
        v.sort();
        v
    };
    // Every machine's ad carries its owner policy, so a constraint on
    // `State` finds the machines whose owners are back.
    let json = ok(carmi(&config).args(["status", "--json"]).output().unwrap());
    let machines: serde_json::Value = serde_json::from_str(&json).unwrap();
    for m in machines.as_array().unwrap() {
        if m["slots"].as_array().unwrap().is_empty() {
            continue;
        }
        let a = &m["attributes"];
        assert!(a["State"].is_string() && a["Activity"].is_string(), "{m}");
        assert!(
            a["KeyboardIdle"].is_i64() && a["EnteredCurrentState"].is_i64(),
            "{m}"
        );
        assert!(a["Start"].is_string(), "the policy's Start expression: {m}");
    }
    let mut owned = String::new();
    for _ in 0..250 {
        owned = ok(carmi(&config)
            .args([
                "status",
                "-constraint",
                "State == \"Owner\"",
                "-af",
                "Name",
                "State",
            ])
            .output()
            .unwrap());
        if !owned.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !owned.is_empty(),
        "no machine's ad ever said State == \"Owner\""
    );
    for line in owned.lines() {
        assert!(
            line.starts_with("host") && line.ends_with(" Owner"),
            "{owned}"
        );
    }
    let first = states();
    let mut changed = false;
    for _ in 0..250 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if states() != first {
            changed = true;
            break;
        }
    }
    ok(carmi(&config).args(["pool", "down"]).output().unwrap());
    assert!(changed, "the pool stayed at {first:?}");
}

/// An HTTPS GET of `path` at `addr` (the dashboard): the whole answer.
fn http_get(addr: &str, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    carmi_testkit::https(addr, &req)
}
