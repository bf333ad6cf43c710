//! `carmi logs` at the local RM's core: a read of a started master goes to
//! the driver with the file its submit file named; a read of a process that
//! is not here, or not started, is answered at once with why; no answer is
//! kept for a later connection.

use super::*;

fn registered_with_master(output: Option<&str>) -> Core {
    let mut core = Core::new(1);
    core.on_global_connected("[]".into());
    core.on_global(
        FromGlobal::Registered {
            hosts: vec![HostId(1)],
            heartbeat_ms: 1000,
        },
        Bytes::new(),
    );
    core.on_global(
        FromGlobal::SpawnMaster {
            process: ProcessId(5),
            job: JobId(2),
            executable: ExecutableRef {
                name: "m".into(),
                sha256: "ab".repeat(32),
                size: 1,
            },
            args: vec![],
            env: vec![],
            output: output.map(Into::into),
            error: None,
            input_files: vec![],
            return_files: vec![],
            inputs: vec![],
            requests: Default::default(),
        },
        Bytes::new(),
    );
    core.take_effects();
    core
}

fn read(core: &mut Core, process: u64, stream: StdStream) -> Vec<Effect> {
    core.on_global(
        FromGlobal::ReadLog {
            request: 3,
            process: ProcessId(process),
            stream,
            offset: 10,
        },
        Bytes::new(),
    );
    core.sanity_check();
    core.take_effects()
}

fn refusal(effects: &[Effect]) -> String {
    match effects {
        [
            Effect::ToGlobal(
                ToGlobal::LogRead {
                    request: 3,
                    result: Err(why),
                },
                _,
            ),
        ] => why.clone(),
        _ => panic!("one refusal expected: {effects:?}"),
    }
}

#[test]
fn a_started_masters_output_is_read_by_the_driver_from_its_file() {
    let mut core = registered_with_master(Some("/home/a/out.txt"));
    assert!(refusal(&read(&mut core, 5, StdStream::Stdout)).contains("has not started yet"));
    core.on_launched(ProcessId(5), Ok(()));
    core.take_effects();
    let want = |stream, path: Option<&str>| Effect::ReadLog {
        request: 3,
        process: ProcessId(5),
        job: JobId(2),
        stream,
        offset: 10,
        path: path.map(Into::into),
    };
    assert_eq!(
        read(&mut core, 5, StdStream::Stdout),
        [want(StdStream::Stdout, Some("/home/a/out.txt"))]
    );
    // No `error =`: the sandbox's file, which the driver knows.
    assert_eq!(
        read(&mut core, 5, StdStream::Stderr),
        [want(StdStream::Stderr, None)]
    );
    let chunk = LogChunk {
        text: "x".into(),
        next: 11,
        size: 11,
    };
    core.on_log_read(3, Ok(chunk.clone()));
    assert_eq!(
        core.take_effects(),
        [Effect::ToGlobal(
            ToGlobal::LogRead {
                request: 3,
                result: Ok(chunk.clone())
            },
            Bytes::new()
        )]
    );
    // Read while connected, answered after the link went: dropped, not kept.
    core.on_global_lost(Vec::new());
    core.on_log_read(3, Ok(chunk));
    assert!(core.take_effects().is_empty());
    assert_eq!(core.backlog_len(), 0);
}

#[test]
fn a_process_that_is_not_here_is_refused_at_once() {
    let mut core = registered_with_master(None);
    let why = refusal(&read(&mut core, 9, StdStream::Stdout));
    assert!(
        why.contains("process p9") && why.contains("not running on this machine"),
        "{why}"
    );
}
