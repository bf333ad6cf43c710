//! A submit description from a user: parsing it ends in a cluster of jobs or
//! a list of errors, never a crash or a job that breaks the pool's limits.
//! The world it is read in has an item file, a command and a directory, so
//! that every `queue` form is reached.
#![no_main]

use carmi_proto::submit::{FixedEnv, parse_cluster};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut env = FixedEnv::default();
    env.files.insert("items.txt".into(), "a b\nc,d\n\ne\n".into());
    env.commands.insert("seq 3".into(), "1\n2\n3\n".into());
    env.dirs
        .insert(String::new(), vec![("a.dat".into(), false), ("d".into(), true)]);
    env.vars.insert("HOME".into(), "/home/fuzz".into());
    if let Ok(cluster) = parse_cluster("fuzz.sub", text, &env) {
        for p in &cluster.procs {
            assert!(
                carmi_proto::limits::check_spec(p).is_empty(),
                "a proc the parser accepted breaks a limit: {p:?}"
            );
        }
    }
});
