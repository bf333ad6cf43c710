//! A local RM whose global RM sends no credential for a job (a test double,
//! an older global RM) does not run the job open, nor hand it the pool
//! secret: it makes a random credential of that job, good on this machine
//! only, and warns (`carmi_local::jobcred::JobCreds::hold`).

use carmi_api::exe::sha256_hex;
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::{ExecutableRef, ExitStatus, FromGlobal, ToGlobal};
use carmi_local::daemon::Daemon;

mod common;

use common::*;

fn spawn_msg(process: u64, job: u64, executable: &ExecutableRef) -> FromGlobal {
    FromGlobal::Spawn {
        process: ProcessId(process),
        job: JobId(job),
        host: HostId(10),
        executable: executable.clone(),
        args: vec![],
        output: Default::default(),
        requests: Default::default(),
    }
}

/// Runs process `process` of `job` to its end.
async fn run(
    g: &mut carmi_testkit::GlobalConn,
    process: u64,
    job: u64,
    exe: &ExecutableRef,
    bytes: &[u8],
) {
    g.send(spawn_msg(process, job, exe), &[]).await;
    let (mut msg, _) = g.recv().await;
    if let ToGlobal::Fetch { .. } = msg {
        g.send(
            FromGlobal::Executable {
                executable: exe.clone(),
            },
            bytes,
        )
        .await;
        msg = g.recv().await.0;
    }
    assert_eq!(
        msg,
        ToGlobal::Started {
            process: ProcessId(process),
            result: Ok(())
        }
    );
    let (msg, _) = g.recv().await;
    assert!(
        matches!(
            msg,
            ToGlobal::Exited {
                status: ExitStatus::Code(0),
                ..
            }
        ),
        "{msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_global_rm_sent_no_credential_for_gets_a_random_one_not_the_pool_secret() {
    init_logs();
    let dir = TempDir::new("nocred");
    let global = carmi_testkit::FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "nc-m1"))
        .await
        .unwrap();
    let mut g = global.accept("nc-m1").await;
    g.register(&[10, 11]).await;
    let text = "#!/bin/sh\n\
                cat \"$CARMI_SECRET_FILE\"\n\
                stat -c %a \"$CARMI_SECRET_FILE\"\n\
                env | grep -c '^CARMI_SECRET=\\|^CARMI_TOKEN='\n\
                exit 0\n";
    let bytes = text.as_bytes().to_vec();
    let exe = ExecutableRef {
        name: "cred.sh".into(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    run(&mut g, 1, 1, &exe, &bytes).await;
    run(&mut g, 2, 2, &exe, &bytes).await;
    let out = |job: u64, process: u64| {
        std::fs::read_to_string(
            daemon
                .work_dir()
                .join(format!("output/{job}/{process}.out")),
        )
        .unwrap()
    };
    let (one, two) = (out(1, 1), out(2, 2));
    let pool_secret = String::from_utf8_lossy(SECRET).to_string();
    for (job, text) in [(1, &one), (2, &two)] {
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with(&format!("carmi-job-credential {} ", JobId(job))),
            "job {job}'s process holds a credential of its job: {text}"
        );
        assert!(
            !text.contains(pool_secret.trim()),
            "the pool secret reached a job: {text}"
        );
        assert_eq!(
            &lines[1..],
            ["600", "0"],
            "mode 0600, no secret in the environment: {text}"
        );
    }
    // Made at random per job: one job's key is not another's.
    let key = |t: &str| {
        t.lines()
            .next()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    assert_ne!(key(&one), key(&two));
    daemon.shutdown().await;
}
