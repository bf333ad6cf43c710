//! End to end, submit from anywhere (issue 20, item 3): a job submitted from
//! a directory of a machine that runs no local RM (this test process: no
//! `CARMI_MACHINE`, and a host name that is no pool machine, whose local
//! RMs are named m0, m1) has its master placed by the global RM on a
//! machine its `master_requirements` accept; `carmi wait` exits with the
//! master's exit status and writes its output, error and
//! `transfer_output_files` into the submit directory; `carmi fetch` brings
//! them back again, also after the global RM restarted. Its
//! `transfer_input_files` travel through the pool, as its executable does.

use std::time::Duration;

use carmi_tests::{Pool, text};

#[test]
fn a_job_from_outside_the_pool_runs_and_its_files_come_back() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(
        !matches!(host.trim(), "m0" | "m1"),
        "this test needs a host name that is not a machine of its pool"
    );
    let pool = Pool::start(
        "anywhere",
        1,
        &[vec!["Big=false".into()], vec!["Big=true".into()]],
    );
    let submit_dir = pool.dir.join("laptop").join("project");
    std::fs::create_dir_all(&submit_dir).unwrap();
    pool.wait_registered();
    std::fs::write(submit_dir.join("params.txt"), "alpha = 0.5\n").unwrap();
    // The README's words: a relative path, from the submit directory.
    let job = pool.submit_script(
        &submit_dir,
        "#!/bin/sh\necho \"master in $(pwd)\"\ncat params.txt\necho 'a warning' >&2\nmkdir -p res\necho 42 > res/result.dat\nhead -c 3145728 /dev/zero | tr '\\0' x > big.bin\nexit 3\n",
        "universe = vanilla\nexecutable = master.sh\noutput = out.txt\nerror = err.txt\n\
         transfer_input_files = params.txt\nlog = job.log\n\
         should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n\
         transfer_output_files = res/result.dat, big.bin\nmaster_requirements = Big == true\nqueue\n",
    );
    assert!(
        !text(
            &pool
                .carmi_in(&submit_dir)
                .args(["submit", "--dry-run", "job.sub"])
                .output()
                .unwrap()
                .stderr
        )
        .contains("not brought back"),
        "the warning that output files do not come back is gone"
    );

    let out = pool.wait_job(&submit_dir, &job, 60);
    assert_eq!(
        out.status.code(),
        Some(3),
        "wait gives the master's exit status\n{}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    let read = |name: &str| std::fs::read_to_string(submit_dir.join(name)).unwrap_or_default();
    // It ran on m1, the only machine with Big == true, in a sandbox there.
    let output = read("out.txt");
    assert!(
        output.starts_with("master in ")
            && output.contains("/m1/sandbox/")
            && output.contains("alpha = 0.5\n"),
        "out.txt: {output:?}\n{}",
        pool.logs()
    );
    // The input file reached m1 by content, through the pool (its cache
    // holds it by hash), not by its path on the submit machine.
    let params_hash = carmi_api::exe::sha256_hex(b"alpha = 0.5\n");
    assert!(
        pool.dir
            .join("m1")
            .join("cache")
            .join(&params_hash)
            .is_file(),
        "params.txt is not in m1's cache\n{}",
        pool.logs()
    );
    assert_eq!(read("err.txt"), "a warning\n");
    // The event log is in the submit directory too, up to the end.
    let log = read("job.log");
    assert!(
        log.contains(" submitted ")
            && log.contains(" master-started m1")
            && log.contains(" ended exit 3"),
        "job.log: {log}"
    );
    assert_eq!(read("result.dat"), "42\n");
    // Megabytes travel as well as lines.
    let big = std::fs::read(submit_dir.join("big.bin")).unwrap_or_default();
    assert!(
        big.len() == 3 << 20 && big.iter().all(|&b| b == b'x'),
        "big.bin: {} bytes",
        big.len()
    );

    // Kept by the global RM beside its history, across a restart.
    std::fs::remove_file(submit_dir.join("out.txt")).unwrap();
    std::fs::remove_file(submit_dir.join("result.dat")).unwrap();
    let mut pool = pool;
    pool.restart_global();
    let fetched = pool.wait_for("fetch after a restart", Duration::from_secs(30), || {
        let fetch = pool.carmi_in(&submit_dir).args(["fetch", &job]).output();
        let out = fetch.expect("run carmi fetch");
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(text(&out.stderr))
        }
    });
    assert!(fetched.contains("out.txt"), "{fetched}");
    assert_eq!(read("out.txt"), output);
    assert_eq!(read("result.dat"), "42\n");
    let history = pool.run_ok(pool.carmi_in(&submit_dir).arg("history"));
    assert!(history.contains("master.sh"), "{history}");
}

#[test]
fn a_master_that_fits_no_machine_waits_and_q_says_why() {
    let pool = Pool::start("anywhere-wait", 1, &[vec!["Big=false".into()]]);
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    let job = pool.submit_script(
        &dir,
        "#!/bin/sh\nexit 0\n",
        "executable = master.sh\nmaster_requirements = Big == true\nqueue\n",
    );
    let q = pool.run_ok(pool.carmi_in(&dir).args(["q"]));
    assert!(q.contains("master_requirements = Big == true"), "{q}");
    // Still queued, not failed.
    let out = pool.wait_job(&dir, &job, 1);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
}

#[test]
fn a_master_whose_machine_dies_starts_again_elsewhere_and_its_output_comes_back() {
    let mut pool = Pool::start("anywhere-lost", 1, &[vec![], vec![]]);
    let dir = pool.dir.join("laptop");
    std::fs::create_dir_all(&dir).unwrap();
    pool.wait_registered();
    // The first run leaves a mark and waits (to be cut off); the second
    // finds the mark (this test shares one file system) and exits.
    let mark = dir.join("first-run");
    let master = format!(
        "#!/bin/sh\nif [ -e {m} ]; then echo \"second run in $(pwd)\"; exit 0; fi\ntouch {m}\nsleep 600\n",
        m = mark.display()
    );
    let submit = "executable = master.sh\noutput = out.txt\nqueue\n";
    let job = pool.submit_script(&dir, &master, submit);
    pool.wait_until("a first run", Duration::from_secs(30), || mark.exists());
    // Kill the machine the first run is on: the one with a sandbox.
    let busy = |i: usize| {
        std::fs::read_dir(pool.dir.join(format!("m{i}")).join("sandbox"))
            .map(|d| d.count() > 0)
            .unwrap_or(false)
    };
    let (first, other) = if busy(0) { (0, 1) } else { (1, 0) };
    assert!(busy(first), "the first run has a sandbox\n{}", pool.logs());
    pool.kill_local(first);
    let out = pool.wait_job(&dir, &job, 60);
    pool.assert_exit(&out, 0);
    let output = std::fs::read_to_string(dir.join("out.txt")).unwrap_or_default();
    assert!(
        output.starts_with("second run in ") && output.contains(&format!("/m{other}/sandbox/")),
        "out.txt: {output:?}\n{}",
        pool.logs()
    );
}
