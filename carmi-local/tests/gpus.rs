//! A local RM configured with two GPUs and two slots, against an in-process
//! fake global RM: its ad says one GPU per slot and two in all, and each
//! slot's process sees its own GPU in `CUDA_VISIBLE_DEVICES`.

use carmi_api::exe::sha256_hex;
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::{ExecutableRef, ExitStatus, FromGlobal, ToGlobal};
use carmi_local::daemon::Daemon;

mod common;

use common::*;

fn spawn_msg(process: u64, host: u64, executable: &ExecutableRef) -> FromGlobal {
    FromGlobal::Spawn {
        process: ProcessId(process),
        job: JobId(1),
        host: HostId(host),
        executable: executable.clone(),
        args: Vec::new(),
        output: Default::default(),
        requests: Default::default(),
    }
}

/// Runs process `process` on `host` to its exit; what it printed.
async fn run_on(
    g: &mut GlobalConn,
    daemon: &Daemon,
    (process, host): (u64, u64),
    (exe, bytes): (&ExecutableRef, &[u8]),
) -> String {
    g.send(spawn_msg(process, host, exe), &[]).await;
    loop {
        match g.recv().await.0 {
            ToGlobal::Fetch { .. } => {
                let msg = FromGlobal::Executable {
                    executable: exe.clone(),
                };
                g.send(msg, bytes).await;
            }
            ToGlobal::Started { result, .. } => assert_eq!(result, Ok(())),
            ToGlobal::Exited { status, .. } => {
                assert_eq!(status, ExitStatus::Code(0));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let out = daemon.work_dir().join(format!("output/1/{process}.out"));
    std::fs::read_to_string(out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_gpus_are_shared_among_the_slots_and_each_slot_sees_its_own() {
    init_logs();
    let dir = TempDir::new("gpus");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "it-gpus");
    s.gpus = Some(2);
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("it-gpus").await;
    let (ad, _) = g.register(&[10, 11]).await;
    assert_eq!(ad.eval_attr("GPUs").as_f64(), Some(1.0));
    assert_eq!(ad.eval_attr("TotalGPUs").as_f64(), Some(2.0));
    let text = "#!/bin/sh\necho \"cuda=$CUDA_VISIBLE_DEVICES\"\n";
    let exe = ExecutableRef {
        name: "job.sh".into(),
        sha256: sha256_hex(text.as_bytes()),
        size: text.len() as u64,
    };
    let program = (&exe, text.as_bytes());
    assert_eq!(run_on(&mut g, &daemon, (1, 11), program).await, "cuda=1\n");
    assert_eq!(run_on(&mut g, &daemon, (2, 10), program).await, "cuda=0\n");
    daemon.shutdown().await;
}
