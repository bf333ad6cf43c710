//! The `carmi` command: `pool init` on real files, `status` against a fake global RM over TCP.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use carmi_api::handshake::Secret;
use carmi_api::ids::{HostId, JobId};
use carmi_api::msg::{FromGlobal, MachineStatus, SlotStatus, ToGlobal};
use carmi_testkit::FakeGlobal;
use tokio::net::TcpListener;

/// The command with none of its environment variables inherited from the test's environment.
fn carmi() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_carmi"));
    cmd.env_remove("CARMI_SECRET")
        .env_remove("CARMI_POOL")
        .env_remove("CARMI_LOCAL")
        .env("CARMI_CONFIG", "/nonexistent/carmi-test-config.toml");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn pool_init_writes_a_fresh_secret_readable_by_its_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.secret");
    let out = carmi()
        .args(["pool", "init", "--secret"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("wrote a new pool secret"));
    assert_eq!(mode(&path), 0o600);
    let secret = std::fs::read_to_string(&path).unwrap();
    assert_eq!(secret.trim().len(), 64);
    assert!(secret.trim().chars().all(|c| c.is_ascii_hexdigit()));
    Secret::from_file(&path).expect("a usable secret");
}

#[test]
fn pool_init_refuses_to_overwrite_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.secret");
    let init = |force: bool| {
        let mut cmd = carmi();
        cmd.args(["pool", "init", "--secret"]).arg(&path);
        if force {
            cmd.arg("--force");
        }
        cmd.output().unwrap()
    };
    assert!(init(false).status.success());
    let first = std::fs::read_to_string(&path).unwrap();

    let out = init(false);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("already exists") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);

    // Replacing also tightens a file that someone made readable to others.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = init(true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_ne!(std::fs::read_to_string(&path).unwrap(), first);
    assert_eq!(mode(&path), 0o600);
    // The secret, and beside it the signing key, the first admin token and
    // the dashboard's certificate and key.
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        5,
        "no temporary file left"
    );
    for f in ["pool.key", "pool.admin.token", "dashboard.key"] {
        assert_eq!(mode(&dir.path().join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&dir.path().join("dashboard.crt")), 0o644);
}

#[test]
fn pool_init_defaults_to_carmi_secret_then_the_pool_directory() {
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("from-env.secret");
    let out = carmi()
        .args(["pool", "init"])
        .env("CARMI_SECRET", &named)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&named), 0o600);
    assert!(!dir.path().join("pool.secret").exists());
    assert!(
        !dir.path().join("config.toml").exists(),
        "--secret writes no config"
    );

    // The pool's directory ($CARMI_DIR stands for /etc/carmi or
    // ~/.config/carmi): every file, and config.toml naming the pool, the
    // secret and the admin token, which `carmi` then finds with no export.
    let pool_dir = dir.path().join("etc-carmi");
    let out = carmi()
        .args(["pool", "init", "--pool", "manager:9618"])
        .env_remove("CARMI_SECRET")
        .env("CARMI_DIR", &pool_dir)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    for f in [
        "pool.secret",
        "pool.key",
        "pool.admin.token",
        "dashboard.key",
    ] {
        assert_eq!(mode(&pool_dir.join(f)), 0o600, "{f}");
    }
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(pool_dir.join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["pool"].as_str(), Some("manager:9618"));
    let token = pool_dir.join("pool.admin.token");
    assert_eq!(config["token"].as_str(), Some(token.to_str().unwrap()));
    // The fingerprint it printed is the certificate's.
    let pem = std::fs::read(pool_dir.join("dashboard.crt")).unwrap();
    let (_, fingerprint) = carmi_api::webcert::load(
        &pool_dir.join("dashboard.crt"),
        &pool_dir.join("dashboard.key"),
    )
    .unwrap();
    assert!(
        text(&out.stdout).contains(&fingerprint),
        "{}",
        text(&out.stdout)
    );
    // A second init refuses, naming the files, and changes nothing.
    let out = carmi()
        .args(["pool", "init"])
        .env_remove("CARMI_SECRET")
        .env("CARMI_DIR", &pool_dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pool.secret"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(pool_dir.join("dashboard.crt")).unwrap(), pem);
}

fn pool() -> Vec<MachineStatus> {
    let attrs = |arch: &str, memory: u32, load: &str| {
        vec![
            ("Arch".to_string(), format!("\"{arch}\"")),
            ("OpSys".to_string(), "\"LINUX\"".to_string()),
            ("Memory".to_string(), memory.to_string()),
            ("Cpus".to_string(), "2".to_string()),
            ("Mips".to_string(), "11500".to_string()),
            ("KFlops".to_string(), "1420000".to_string()),
            ("LoadAvg".to_string(), load.to_string()),
        ]
    };
    vec![
        MachineStatus {
            name: "lab-pc-01.example.edu".into(),
            attributes: attrs("X86_64", 16384, "0.25").into(),
            slots: vec![
                SlotStatus {
                    host: HostId(1),
                    state: "idle".into(),
                    job: None,
                },
                SlotStatus {
                    host: HostId(2),
                    state: "claimed".into(),
                    job: Some(JobId(3)),
                },
            ],
        },
        MachineStatus {
            name: "desk7".into(),
            attributes: attrs("aarch64", 8192, "1.5").into(),
            slots: vec![SlotStatus {
                host: HostId(3),
                state: "owner".into(),
                job: None,
            }],
        },
        // A submit machine: it lends no slots.
        MachineStatus {
            name: "submit".into(),
            attributes: attrs("X86_64", 4096, "0.1").into(),
            slots: vec![],
        },
    ]
}

/// A global RM that answers every admin's `Status` with `machines`, and
/// `MachineAds` with their ads: the status attributes plus what only the
/// whole ad carries (an owner's `--attr`, the policy's `State`).
async fn fake_global(secret: &[u8], machines: Vec<MachineStatus>) -> String {
    fake_global_answering(secret, move |msg| match msg {
        ToGlobal::Status => {
            FromGlobal::Pool(machines.iter().cloned().map(std::sync::Arc::new).collect())
        }
        ToGlobal::MachineAds => FromGlobal::Ads(machines.iter().map(whole_ad).collect()),
        other => panic!("unexpected request {other:?}"),
    })
    .await
}

fn whole_ad(m: &MachineStatus) -> (String, std::sync::Arc<str>) {
    let mut text = String::from("[");
    for (name, value) in m.attributes.iter() {
        text.push_str(&format!("{name} = {value}; "));
    }
    let state = if m.name == "desk7" {
        "Owner"
    } else {
        "Unclaimed"
    };
    text.push_str(&format!(
        "State = \"{state}\"; Department = \"physics\"; Name = \"{}\" ]",
        m.name
    ));
    (m.name.clone(), text.into())
}

/// A global RM that answers each admin's request (after any `Upload`) with
/// `answer(request)`; returns its address.
async fn fake_global_answering(
    secret: &[u8],
    answer: impl Fn(ToGlobal) -> FromGlobal + Send + 'static,
) -> String {
    let global = FakeGlobal::with_secret(secret).await;
    let addr = global.addr();
    global.answer_admins(answer);
    addr
}

const POOL_SECRET: &str = "the fake pool's secret, 0123456789";

fn secret_file(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("pool.secret");
    std::fs::write(&path, text).unwrap();
    path
}

async fn run(cmd: std::process::Command) -> Output {
    tokio::process::Command::from(cmd).output().await.unwrap()
}

#[tokio::test]
async fn status_prints_the_pool_as_a_table() {
    let addr = fake_global(POOL_SECRET.as_bytes(), pool()).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    let mut cmd = carmi();
    cmd.args(["status", "--pool", &addr, "--secret"])
        .arg(&secret);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 7, "{table}");
    let words = |line: &str| {
        line.split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(lines[0]),
        [
            "Name", "Arch", "OpSys", "Memory", "Cpus", "Mips", "KFlops", "LoadAvg", "Slots"
        ]
    );
    assert_eq!(
        words(lines[1]),
        [
            "lab-pc-01.example.edu",
            "X86_64",
            "LINUX",
            "16384",
            "2",
            "11500",
            "1420000",
            "0.25",
            "idle",
            "claimed:j3"
        ]
    );
    assert_eq!(
        words(lines[2]),
        [
            "desk7", "aarch64", "LINUX", "8192", "2", "11500", "1420000", "1.5", "owner"
        ]
    );
    // The summary by architecture, then the total.
    assert_eq!(words(lines[3])[0], "submit");
    assert_eq!(
        words(lines[4]),
        ["X86_64:", "2", "slots", "1", "claimed,", "1", "idle"]
    );
    assert_eq!(words(lines[5]), ["aarch64:", "1", "slots", "1", "owner"]);
    assert_eq!(
        lines[6],
        "2 machines, 3 slots: 1 claimed, 1 idle, 1 owner; 1 submit machine (no slots)"
    );
}

#[tokio::test]
async fn status_prints_json_and_reads_its_settings_from_the_environment() {
    let addr = fake_global(POOL_SECRET.as_bytes(), pool()).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    let mut cmd = carmi();
    cmd.args(["status", "--json"])
        .env("CARMI_POOL", &addr)
        .env("CARMI_SECRET", &secret);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
    let first = &json[0];
    assert_eq!(first["name"], "lab-pc-01.example.edu");
    assert_eq!(first["attributes"]["Arch"], "X86_64");
    assert_eq!(first["attributes"]["Memory"], 16384);
    assert_eq!(first["attributes"]["LoadAvg"], 0.25);
    // The whole ad, not only the table's columns.
    assert_eq!(first["attributes"]["Department"], "physics");
    assert_eq!(json[1]["attributes"]["State"], "Owner");
    assert_eq!(
        first["slots"],
        serde_json::json!([
            { "host": "h1", "state": "idle", "job": null },
            { "host": "h2", "state": "claimed", "job": 3 },
        ])
    );
}

#[tokio::test]
async fn status_selects_by_policy_state_and_prints_chosen_attributes() {
    let addr = fake_global(POOL_SECRET.as_bytes(), pool()).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    let status = |args: &[&str]| {
        let mut cmd = carmi();
        cmd.arg("status")
            .args(args)
            .env("CARMI_POOL", &addr)
            .env("CARMI_SECRET", &secret);
        run(cmd)
    };
    let out = status(&[
        "-constraint",
        "State == \"Owner\"",
        "-af",
        "Name",
        "State",
        "Memory",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "desk7 Owner 8192\n");
    let out = status(&["-af", "Name", "NoSuchAttribute"]).await;
    assert_eq!(
        text(&out.stdout),
        "lab-pc-01.example.edu undefined\ndesk7 undefined\nsubmit undefined\n"
    );
    let out = status(&["-total"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(!summary.contains("lab-pc-01"), "{summary}");
    assert_eq!(summary.lines().count(), 3, "{summary}");
    assert!(
        summary.ends_with("1 submit machine (no slots)\n"),
        "{summary}"
    );
}

/// [`pool`] where lab-pc-01 has two GPUs (one per slot) and says its
/// whole memory, as a local RM that found them advertises.
fn gpu_pool() -> Vec<MachineStatus> {
    let mut machines = pool();
    add_attributes(
        &mut machines[0],
        &[("GPUs", "1"), ("TotalGPUs", "2"), ("TotalMemory", "32768")],
    );
    add_attributes(&mut machines[1], &[("GPUs", "0")]);
    machines
}

/// Adds `pairs` to what `Status` shows of `m`.
fn add_attributes(m: &mut MachineStatus, pairs: &[(&str, &str)]) {
    let mut attrs = m.attributes.to_vec();
    attrs.extend(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    m.attributes = attrs.into();
}

/// `carmi status ARGS` against a fake global RM serving `machines`.
async fn status_of(machines: Vec<MachineStatus>, args: &[&str]) -> Output {
    let addr = fake_global(POOL_SECRET.as_bytes(), machines).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    let mut cmd = carmi();
    cmd.arg("status")
        .args(args)
        .env("CARMI_POOL", &addr)
        .env("CARMI_SECRET", &secret);
    run(cmd).await
}

#[tokio::test]
async fn status_long_with_a_name_prints_that_machines_ad_or_its_slots() {
    let out = status_of(pool(), &["-l", "desk7"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ad = text(&out.stdout);
    assert!(ad.contains("Name = \"desk7\"\n"), "{ad}");
    assert!(ad.contains("State = \"Owner\"\n"), "{ad}");
    assert!(!ad.contains("lab-pc-01"), "{ad}");
    assert_eq!(ad.matches("\n\n").count(), 1, "one ad: {ad}");
    // A slot, as HTCondor names it: the machine's ad and that slot's state.
    let out = status_of(pool(), &["-long", "slot2@lab-pc-01.example.edu"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ad = text(&out.stdout);
    assert!(ad.contains("Name = \"lab-pc-01.example.edu\"\n"), "{ad}");
    assert!(
        ad.ends_with("SlotID = 2\nSlotState = \"claimed\"\nSlotJob = 3\n\n"),
        "{ad}"
    );
    // Without -l, a name keeps that machine's row only.
    let out = status_of(pool(), &["desk7"]).await;
    let table = text(&out.stdout);
    assert_eq!(table.lines().filter(|l| l.starts_with("desk7")).count(), 1);
    assert!(!table.contains("lab-pc-01"), "{table}");
}

#[tokio::test]
async fn status_of_a_machine_or_slot_the_pool_lacks_says_so() {
    let out = status_of(pool(), &["-l", "nosuch"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("no machine named nosuch in the pool"), "{err}");
    assert!(out.stdout.is_empty());
    let out = status_of(pool(), &["-l", "slot3@desk7"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("machine desk7 has 1 slot"), "{err}");
}

#[tokio::test]
async fn status_compact_prints_one_line_per_machine() {
    let out = status_of(gpu_pool(), &["-compact"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let words = |line: &str| {
        line.split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        words(lines[0]),
        [
            "Machine", "Platform", "Slots", "Cpus", "GPUs", "Memory", "States", "LoadAvg"
        ]
    );
    assert_eq!(
        words(lines[1]),
        [
            "lab-pc-01.example.edu",
            "X86_64/LINUX",
            "2",
            "2",
            "2",
            "32768",
            "1",
            "claimed,",
            "1",
            "idle",
            "0.25"
        ]
    );
    assert_eq!(
        words(lines[2]),
        [
            "desk7",
            "aarch64/LINUX",
            "1",
            "2",
            "0",
            "8192",
            "owner",
            "1.5"
        ]
    );
    assert_eq!(words(lines[3])[..3], ["submit", "X86_64/LINUX", "0"]);
    // Then the summary, as the table ends.
    assert!(table.ends_with("1 submit machine (no slots)\n"), "{table}");
}

#[tokio::test]
async fn status_gpus_lists_the_machines_with_gpus_and_what_they_are() {
    let mut machines = gpu_pool();
    add_attributes(
        &mut machines[0],
        &[
            ("GPUs_Capability", "8.0"),
            ("CUDAGlobalMemoryMb", "40960"),
            ("GPUs_DeviceName", "\"NVIDIA A100\""),
        ],
    );
    let out = status_of(machines, &["-gpus"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let words = |line: &str| {
        line.split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert_eq!(
        words(lines[0]),
        [
            "Machine",
            "Slots",
            "GPUs",
            "TotalGPUs",
            "Capability",
            "GpuMemory",
            "DeviceName",
            "States"
        ]
    );
    // The older CUDA name is read when the current one is missing.
    assert_eq!(
        words(lines[1]),
        [
            "lab-pc-01.example.edu",
            "2",
            "1",
            "2",
            "8.0",
            "40960",
            "NVIDIA",
            "A100",
            "1",
            "claimed,",
            "1",
            "idle"
        ]
    );
    assert_eq!(lines[2], "1 machine with GPUs, 2 GPUs");
    // With -af: only the machines with GPUs.
    let out = status_of(gpu_pool(), &["-gpus", "-af", "Name"]).await;
    assert_eq!(text(&out.stdout), "lab-pc-01.example.edu\n");
}

#[tokio::test]
async fn status_table_has_a_gpus_column_when_a_machine_has_gpus() {
    let out = status_of(gpu_pool(), &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header[3..6], ["Memory", "Cpus", "GPUs"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[4..6], ["2", "1"], "{table}");
    // A machine that says nothing of GPUs shows `-`.
    assert_eq!(lines[3].split_whitespace().nth(5), Some("-"), "{table}");
}

#[test]
fn ssh_to_job_says_it_is_not_here_yet_and_what_to_use_instead() {
    for args in [&["ssh_to_job", "3.0"][..], &["ssh-to-job", "3", "ls", "-l"]] {
        let out = carmi().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.starts_with("carmi: error: ssh_to_job "), "{err}");
        assert!(err.contains("carmi logs -f "), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[tokio::test]
async fn status_with_the_wrong_secret_says_so() {
    let addr = fake_global(POOL_SECRET.as_bytes(), pool()).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), "some other pool's secret entirely");
    let mut cmd = carmi();
    cmd.args(["status", "--pool", &addr, "--secret"])
        .arg(&secret);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("carmi: error: authentication with the global RM at")
            && err.contains("secret"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn status_of_an_unreachable_pool_says_where_it_looked() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    let mut cmd = carmi();
    cmd.args(["status", "--pool", &addr, "--secret"])
        .arg(&secret);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach the pool's global RM at {addr}")),
        "{err}"
    );

    // A missing secret file is named too.
    let mut cmd = carmi();
    cmd.args([
        "status",
        "--pool",
        &addr,
        "--secret",
        "/nonexistent/pool.secret",
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent/pool.secret"));
}

#[tokio::test]
async fn rm_and_analyze_take_job_ids_as_status_prints_them() {
    let addr = fake_global_answering(POOL_SECRET.as_bytes(), |msg| match msg {
        ToGlobal::RemoveJob { job, .. } => FromGlobal::Removed { job },
        other => panic!("unexpected {other:?}"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    for id in ["j2", "2"] {
        let mut cmd = carmi();
        cmd.args(["rm", id, "--pool", &addr, "--secret"])
            .arg(&secret);
        let out = run(cmd).await;
        assert!(out.status.success(), "rm {id}: {}", text(&out.stderr));
        // A bare number names a cluster (every proc of it), as condor_rm reads it.
        assert_eq!(text(&out.stdout), "cluster 2 removed\n");
    }
    let mut cmd = carmi();
    cmd.args(["rm", "2.x", "--pool", &addr]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("2.x"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn htcondor_style_options_never_fall_into_the_help() {
    // `-hold` used to be read as `-h old`: the help, exit 0. (`q -hold` is
    // an option now; `-nobatch`, one carmi does not have, is refused by name.)
    let out = run({
        let mut cmd = carmi();
        cmd.args(["q", "-nobatch"]);
        cmd
    })
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--nobatch"), "{err}");
    assert!(!text(&out.stdout).contains("Usage"));
}

#[tokio::test]
async fn submit_takes_a_file_name_without_a_directory() {
    let addr = fake_global_answering(POOL_SECRET.as_bytes(), |msg| match msg {
        ToGlobal::Submit(req) => {
            // Relative paths of the submit file are made absolute.
            let out = req.spec.output.as_deref().unwrap();
            assert!(Path::new(out).is_absolute(), "{out}");
            assert!(out.ends_with("/out/master.out"), "{out}");
            FromGlobal::Submitted { job: JobId(7) }
        }
        other => panic!("unexpected {other:?}"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), POOL_SECRET);
    std::fs::write(dir.path().join("master"), "#!/bin/sh\n").unwrap();
    std::fs::write(
        dir.path().join("job.sub"),
        "executable = ./master\noutput = out/master.out\nqueue\n",
    )
    .unwrap();
    let mut cmd = carmi();
    cmd.current_dir(dir.path())
        .args([
            "submit",
            "job.sub",
            "--machine",
            "m1",
            "--pool",
            &addr,
            "--secret",
        ])
        .arg(&secret);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "7\n");
}

#[test]
fn completions_and_man_pages_come_from_the_options() {
    let out = carmi().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    for word in ["submit", "status", "--constraint", "--af"] {
        assert!(script.contains(word), "no {word} in the bash completions");
    }
    // The script must be valid bash.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("carmi.bash");
    std::fs::write(&file, &script).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));
    let out = carmi().args(["completions", "zsh"]).output().unwrap();
    assert!(text(&out.stdout).contains("#compdef carmi"));

    let pages = dir.path().join("man");
    let out = carmi().arg("man").arg(&pages).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "carmi.1",
        "carmi-submit.1",
        "carmi-status.1",
        "carmi-pool-up.1",
    ] {
        let roff = std::fs::read_to_string(pages.join(page)).unwrap();
        assert!(roff.contains(".TH"), "{page} is not a man page");
    }
    let status = std::fs::read_to_string(pages.join("carmi-status.1")).unwrap();
    assert!(status.contains("constraint"), "{status}");
}

#[test]
fn version_and_bad_arguments_say_so_without_a_backtrace() {
    let out = carmi().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(
        text(&out.stdout).starts_with("carmi "),
        "{}",
        text(&out.stdout)
    );
    let out = carmi()
        .args(["status", "--no-such-option"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--no-such-option"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn the_owner_is_the_user_even_without_user_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.path().join("job.sub"), "executable = m.sh\nqueue\n").unwrap();
    let me = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let me = text(&me.stdout).trim().to_string();
    let out = carmi()
        .args(["submit", "--dry-run", "job.sub"])
        .current_dir(dir.path())
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ads = text(&out.stdout);
    assert!(ads.contains(&format!("Owner = \"{me}\"")), "{ads}");
}
