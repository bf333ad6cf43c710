//! End to end, over a real root local RM with slot users (issue 38 item 1,
//! "No way up"): processes of one job share an account and process ids are
//! sequential, so a job's process can reach the sandbox of its job's next
//! process. Here one ([`carmi-plant`]) plants symbolic links named as the
//! files the local RM puts in a sandbox (the executable, the standard output
//! and error, the credential and its temporary name, the input files) in
//! the next process's sandbox, trying before the directory exists and
//! racing to be first once it does; the next process (a master, so that it
//! has input files by path and by content, and files sent back) replaces
//! the files sent back and its standard error by links and a FIFO. None of
//! it gains anything outside the sandbox: the targets (files of the machine,
//! root's, 0600) are neither truncated, nor handed over, nor readable by the
//! account, nor sent back; the next process starts or fails with a reason;
//! and no link or FIFO reaches the kept output.
//!
//! The test plays the global RM ([`carmi_tests::FakeGlobal`]) so that it
//! chooses the process ids and sends the master's inputs.
//!
//! Needs root: elsewhere it prints `SKIP ...` and passes, unless
//! `CARMI_CI_REQUIRE_SERVICES=1` (CI, which runs as root), where it fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use carmi_api::exe::{ExecutableRef, sha256_hex};
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::{FromGlobal, ToGlobal};
use carmi_tests::{FAKE_SECRET, FakeGlobal, GlobalConn, TempDir, bin_dir, root_ready};

/// The local RM under test; stopped, then its accounts removed, when dropped.
struct Local {
    child: Child,
    prefix: String,
    log: PathBuf,
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new(bin_dir().join("carmi-local"))
            .args(["--remove-slot-users", "--slot-user-prefix", &self.prefix])
            .output();
    }
}

impl Local {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn executable(name: &str, bytes: &[u8]) -> ExecutableRef {
    ExecutableRef {
        name: name.into(),
        sha256: sha256_hex(bytes),
        size: bytes.len() as u64,
    }
}

/// A script that runs `body` and exits, padded to `size` bytes with comment
/// lines the shell never reads: copying it into the sandbox takes a while,
/// time for a race.
fn padded_script(body: &str, size: usize) -> Vec<u8> {
    let mut out = format!("#!/bin/sh\n{body}\nexit 0\n").into_bytes();
    let line = format!("#{}\n", "x".repeat(1022));
    while out.len() < size {
        out.extend_from_slice(line.as_bytes());
    }
    out
}

/// Answers the local RM's fetches from `store` until `process` is started;
/// the start's result.
async fn started(
    g: &mut GlobalConn,
    process: u64,
    store: &[(&ExecutableRef, &[u8])],
    local: &Local,
) -> Result<(), String> {
    loop {
        let (msg, _) = g.recv().await;
        match msg {
            ToGlobal::Fetch { sha256 } => {
                let (exe, bytes) = store
                    .iter()
                    .find(|(e, _)| e.sha256 == sha256)
                    .unwrap_or_else(|| panic!("a fetch of {sha256}, which is no file of the test"));
                let executable = (*exe).clone();
                g.send(FromGlobal::Executable { executable }, bytes).await;
            }
            ToGlobal::Started { process: p, result } if p == ProcessId(process) => return result,
            ToGlobal::Exited { process: p, .. } => {
                panic!(
                    "process {p} exited before process {process} started\n{}",
                    local.log()
                )
            }
            _ => {}
        }
    }
}

/// Waits for `file` to hold `text`, at most 30 s.
fn wait_for_text(file: &Path, text: &str, local: &Local) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(file).is_ok_and(|t| t.contains(text)) {
        assert!(
            Instant::now() < deadline,
            "{} never said {text:?}\n{}",
            file.display(),
            local.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_in_the_next_sandbox_gain_nothing_outside_it() {
    if !root_ready("links_planted_in_the_next_sandbox_gain_nothing_outside_it") {
        return;
    }
    let dir = TempDir::new("sandbox-links");
    let dir = dir.path();
    let secret = dir.join("pool.secret");
    carmi_api::files::write_private(&secret, std::str::from_utf8(FAKE_SECRET).unwrap(), false)
        .unwrap();
    let work = dir.join("work");
    let prefix = format!("csl{}x", std::process::id());
    let global = FakeGlobal::new().await;
    let log = dir.join("local.log");
    let child = Command::new(bin_dir().join("carmi-local"))
        .args(["--global", &global.addr(), "--secret"])
        .arg(&secret)
        .args(["--name", "links", "--slots", "2", "--owner", "simulated"])
        .arg("--work-dir")
        .arg(&work)
        .args(["--slot-user-prefix", &prefix])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start carmi-local");
    let daemon_pid = child.id();
    let local = Local { child, prefix, log };
    let mut g = global.accept("links").await;
    g.register(&[10, 11]).await;

    // Files of the machine, root's and private, outside any sandbox, one
    // for each name the job plants a link by.
    let targets = dir.join("machine");
    std::fs::create_dir_all(&targets).unwrap();
    let victim_name = "victim.sh";
    let credential_tmp = format!(".carmi-credential.tmp-{daemon_pid}");
    let planted = [
        victim_name,
        "stdout",
        "stderr",
        ".carmi-credential",
        &credential_tmp,
        "in-a.txt",
        "in-b.txt",
    ];
    let own_links = ["result.txt", "stderr-late"];
    let secret_text = |name: &str| format!("the machine's own {name}\n");
    for name in planted.iter().chain(&own_links) {
        let path = targets.join(name);
        std::fs::write(&path, secret_text(name)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    // Process 1 of job 1 plants, from the start.
    let plant_bytes = std::fs::read(env!("CARGO_BIN_EXE_carmi-plant")).unwrap();
    let plant = executable("carmi-plant", &plant_bytes);
    let mut args = vec![targets.display().to_string()];
    args.extend(planted.iter().map(|n| n.to_string()));
    g.send(
        FromGlobal::Spawn {
            process: ProcessId(1),
            job: JobId(1),
            host: HostId(10),
            executable: plant.clone(),
            args,
            output: Default::default(),
            requests: Default::default(),
        },
        &[],
    )
    .await;
    let store_plant = [(&plant, plant_bytes.as_slice())];
    let first = started(&mut g, 1, &store_plant, &local).await;
    assert_eq!(first, Ok(()), "{}", local.log());
    let plant_out = work.join("sandbox/1/stdout");
    wait_for_text(&plant_out, "ready", &local);

    // Process 2 of job 1, a master: a large executable, input files by
    // path and by content, and files to send back that it replaces itself.
    let body = format!(
        "echo \"victim runs as $(id -un)\"\ncat in-a.txt in-b.txt\n\
         ln -s {t}/result.txt result.txt\nmkfifo pipe.txt\n\
         rm -f stderr && ln -s {t}/stderr-late stderr",
        t = targets.display()
    );
    let victim_bytes = padded_script(&body, 32 << 20);
    let victim = executable(victim_name, &victim_bytes);
    let submit = dir.join("submit");
    std::fs::create_dir_all(&submit).unwrap();
    std::fs::write(submit.join("in-a.txt"), "input a\n").unwrap();
    let in_b_bytes = b"input b\n".to_vec();
    let in_b = executable("in-b.txt", &in_b_bytes);
    g.send(
        FromGlobal::SpawnMaster {
            process: ProcessId(2),
            job: JobId(1),
            executable: victim.clone(),
            args: vec![],
            env: vec![],
            output: None,
            error: None,
            input_files: vec![submit.join("in-a.txt").display().to_string()],
            return_files: ["stdout", "result.txt", "pipe.txt", "stderr"]
                .map(String::from)
                .to_vec(),
            inputs: vec![in_b.clone()],
            requests: Default::default(),
        },
        &[],
    )
    .await;
    let store = [
        (&victim, victim_bytes.as_slice()),
        (&in_b, in_b_bytes.as_slice()),
    ];
    let second = started(&mut g, 2, &store, &local).await;
    let mut sent_back = None;
    match &second {
        // It runs, to the end (a FIFO among the files sent back must not
        // hold the local RM up), and its files come back.
        Ok(()) => {
            let ended = async {
                loop {
                    let (msg, payload) = g.recv().await;
                    match msg {
                        ToGlobal::MasterFiles {
                            process: ProcessId(2),
                            files,
                        } => sent_back = Some((files, payload)),
                        ToGlobal::Exited {
                            process: ProcessId(2),
                            ..
                        } => break,
                        ToGlobal::Exited {
                            process, status, ..
                        } => panic!("process {process} exited ({status:?})\n{}", local.log()),
                        _ => {}
                    }
                }
            };
            let ended = tokio::time::timeout(Duration::from_secs(30), ended).await;
            assert!(
                ended.is_ok(),
                "process 2's end was never reported (reading what it sends back blocked?)\n{}",
                local.log()
            );
        }
        // Or it does not start, saying why.
        Err(why) => assert!(why.contains("sandbox"), "{why}"),
    }
    // The planter has had its chance; it is let go.
    g.send(
        FromGlobal::Kill {
            process: ProcessId(1),
        },
        &[],
    )
    .await;
    loop {
        if let (
            ToGlobal::Exited {
                process: ProcessId(1),
                ..
            },
            _,
        ) = g.recv().await
        {
            break;
        }
    }
    let report = std::fs::read_to_string(work.join("output/1/1.out")).unwrap_or_default();
    eprintln!(
        "the planter's report:\n{report}the next process: {second:?}; sent back: {:?}",
        sent_back.as_ref().map(|(f, _)| f)
    );

    // Nothing outside the sandbox was written, handed over or read.
    for name in planted.iter().chain(&own_links) {
        let path = targets.join(name);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777, text.as_str()),
            (0, 0, 0o600, secret_text(name).as_str()),
            "the machine's file {name} was changed through a link\n{report}\n{}",
            local.log()
        );
    }
    assert!(
        !report.lines().any(|l| l.starts_with("read ")),
        "the job read a file of the machine:\n{report}"
    );
    assert!(
        report.contains("no way to make ../2:"),
        "the sandbox directory was open before it was made:\n{report}"
    );
    // What came back is the master's own output, nothing of the machine's.
    if let Some((files, bytes)) = &sent_back {
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["stdout"], "{files:?}");
        let text = String::from_utf8_lossy(bytes);
        assert!(text.starts_with("victim runs as "), "{text}");
        assert!(text.contains("input a\ninput b\n"), "{text}");
        assert!(!text.contains("the machine's own"), "{text}");
    }
    // No link (nor FIFO) is kept with the job's output for `carmi logs`.
    for entry in std::fs::read_dir(work.join("output/1")).unwrap().flatten() {
        let kind = entry.file_type().unwrap();
        assert!(
            kind.is_file(),
            "{} is kept and is no regular file",
            entry.path().display()
        );
    }
}
