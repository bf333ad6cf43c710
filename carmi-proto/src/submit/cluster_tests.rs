use super::*;

fn env() -> FixedEnv {
    let mut e = FixedEnv {
        now_unix: 1_796_237_869,
        user: "ann".into(),
        ..FixedEnv::default()
    };
    e.vars.insert("HOME".into(), "/home/ann".into());
    e.vars.insert("PATH".into(), "/bin".into());
    e.files.insert("items.txt".into(), "a b\nc,d\n\ne\n".into());
    e.files.insert("proxy".into(), String::new());
    e.commands.insert("seq 3".into(), "1\n2\n3\n".into());
    e.dirs.insert(
        "".into(),
        vec![
            ("b.dat".into(), false),
            ("a.dat".into(), false),
            (".h.dat".into(), false),
            ("c.dat".into(), true),
            ("x.txt".into(), false),
        ],
    );
    e
}

fn procs(text: &str) -> Vec<JobSpec> {
    match parse_cluster("job.sub", text, &env()) {
        Ok(c) => c.procs,
        Err(e) => panic!("refused: {e}"),
    }
}

fn args(text: &str) -> Vec<String> {
    procs(text).iter().map(|p| p.arguments.join(" ")).collect()
}

fn refusal(text: &str) -> String {
    parse_cluster("job.sub", text, &env())
        .map(|c| format!("accepted {} procs", c.procs.len()))
        .unwrap_or_else(|e| e.to_string())
}

#[test]
fn queue_n_makes_procs_with_their_ids() {
    let p = procs(
        "executable = m\narguments = $(Cluster).$(ProcId) $(Step)\noutput = o.$(ClusterId).$(Process)\nqueue 3\n",
    );
    assert_eq!(p.len(), 3);
    assert_eq!(p[2].arguments, ["$(Cluster).2", "2"]);
    assert_eq!(p[2].output.as_deref(), Some("o.$(ClusterId).2"));
    assert_eq!(p[2].expand(41).output.as_deref(), Some("o.41.2"));
    assert_eq!(p[0].classes.len(), 1);
    assert_eq!((p[0].classes[0].min, p[0].classes[0].max), (1, 1));
}

#[test]
fn every_queue_form() {
    let a = "executable = m\narguments = $(x)|$(y)|$(Item)|$(ItemIndex)|$(Step)|$(ProcId)\n";
    assert_eq!(
        args(&format!("{a}queue 2 x,y in (a, b c)\n")),
        [
            "a|||0|0|0",
            "a|||0|1|1",
            "b|||1|0|2",
            "b|||1|1|3",
            "c|||2|0|4",
            "c|||2|1|5"
        ]
    );
    assert_eq!(
        args(&format!("{a}queue in (p, q)\n")),
        ["||p|0|0|0", "||q|1|0|1"]
    );
    assert_eq!(
        args(&format!(
            "{a}queue x y from (\n 1 2 3\n # note\n 4, 5,6\n)\n"
        )),
        ["1|2 3||0|0|0", "4|5,6||1|0|1"]
    );
    // A blank row repeats the row before it, as HTCondor reads it.
    assert_eq!(
        args(&format!("{a}queue x y from items.txt\n")),
        ["a|b||0|0|0", "c|d||1|0|1", "c|d||2|0|2", "e|||3|0|3"]
    );
    assert_eq!(
        args(&format!("{a}queue from seq 3 |\n")),
        ["||1|0|0|0", "||2|1|0|1", "||3|2|0|2"]
    );
    assert_eq!(
        args(&format!("{a}queue x matching *.dat\n")),
        ["a.dat|||0|0|0", "b.dat|||1|0|1", "c.dat/|||2|0|2"]
    );
    assert_eq!(
        args(&format!("{a}queue 1 matching files *.dat\n")),
        ["||a.dat|0|0|0", "||b.dat|1|0|1"]
    );
    assert_eq!(
        args(&format!("{a}queue x matching dirs *\n")),
        ["c.dat/|||0|0|0"]
    );
    assert!(
        refusal(&format!("{a}queue x from nope.txt\n")).contains("job.sub:3: queue from nope.txt")
    );
    assert!(refusal(&format!("{a}queue x in a b\n")).contains("in parentheses"));
    assert!(refusal(&format!("{a}queue in (\n a\n b )\n")).contains("not closed by `)`"));
    assert!(refusal(&format!("{a}queue lots\n")).contains("expected `queue [N]"));
}

#[test]
fn several_queue_statements_take_the_values_set_before_each() {
    let p = procs(
        "executable = m\narguments = first\nrequirements = Memory > 1\nqueue\narguments = second $(ProcId)\nrequirements = Memory > 2\nqueue 2\n",
    );
    let a: Vec<String> = p.iter().map(|p| p.arguments.join(" ")).collect();
    assert_eq!(a, ["first", "second 1", "second 2"]);
    assert_eq!(p[0].classes[0].requirements, "Memory > 1");
    assert_eq!(p[2].classes[0].requirements, "Memory > 2");
}

#[test]
fn macros_and_late_binding() {
    let p = procs(
        "dir = /mnt/$(who)\nexecutable = $(dir)/m\narguments = $(dir) $(nope:dflt) $ENV(HOME) $$(Memory)\nwho = bob\nqueue\n",
    );
    assert_eq!(p[0].executable, "/mnt/bob/m");
    assert_eq!(
        p[0].arguments,
        ["/mnt/bob", "dflt", "/home/ann", "$$(Memory)"]
    );
}

#[test]
fn commands_and_their_attribute_spellings() {
    let p = procs(
        "Executable = m\nRequestMemory = 2GB\nrequestcpus = 3\nrequest_gpus = 1\nShouldTransferFiles = YES\nWhenToTransferOutput = ON_EXIT\nPeriodicHold = NumJobStarts > 3\non_exit_remove = ExitCode == 0\nstream_output = true\nnotification = Complete\nnotify_user = a@b.c\naccounting_group = physics\nconcurrency_limits = DB:2, LIC\nmax_idle = 5\nmax_materialize = 10\n+Project = \"x\"\nMY.Site = 3\ngetenv = PA*\nenvironment = \"A=1 B='x y'\"\nx509userproxy = proxy\nqueue\n",
    );
    let attr = |n: &str| {
        p[0].attributes
            .iter()
            .find(|(a, _)| a == n)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {n} in {:?}", p[0].attributes))
    };
    assert_eq!(attr("RequestMemory"), "2048");
    assert_eq!(attr("RequestCpus"), "3");
    assert_eq!(attr("RequestGPUs"), "1");
    assert_eq!(attr("PeriodicHold"), "NumJobStarts > 3");
    assert_eq!(attr("OnExitRemove"), "ExitCode == 0");
    assert_eq!(attr("StreamOut"), "true");
    assert_eq!(attr("JobNotification"), "2");
    assert_eq!(attr("NotifyUser"), "\"a@b.c\"");
    assert_eq!(attr("AccountingGroup"), "\"physics.ann\"");
    assert_eq!(attr("ConcurrencyLimits"), "\"db:2,lic\"");
    let nice = procs("executable = m\nnice_user = true\nqueue\n");
    assert!(
        nice[0]
            .attributes
            .contains(&("AccountingGroup".into(), "\"nice-user.ann\"".into()))
    );
    assert_eq!(attr("Project"), "\"x\"");
    assert_eq!(attr("Site"), "3");
    assert_eq!(
        p[0].classes[0].requirements,
        "Cpus >= 3 && Memory >= 2048 && GPUs >= 1"
    );
    let vars: Vec<(&str, &str)> = p[0]
        .environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(vars, [("PATH", "/bin"), ("A", "1"), ("B", "x y")]);
    assert_eq!(p[0].transfer_input_files, ["proxy"]);
    let c = parse_cluster(
        "j",
        "executable = m\nmax_idle = 5\nmax_materialize = 10\nqueue 2\n",
        &env(),
    )
    .unwrap();
    assert_eq!((c.max_materialize, c.max_idle), (Some(10), Some(5)));
}

#[test]
fn refusals_give_the_reason() {
    assert!(
        refusal("executable = m\ndocker_image = x\nqueue\n")
            .contains("containers are not run by this pool")
    );
    assert!(
        refusal("executable = m\nuniverse = docker\nqueue\n").contains("only the vanilla universe")
    );
    assert!(
        refusal("executable = m\nx509userproxy = /nope\nqueue\n").contains("not a readable file")
    );
    assert!(refusal("executable = m\narguments = a \"b\"\nqueue\n").contains("double quote"));
    assert!(
        refusal("executable = m\nperiodic_remove = (time() - \nqueue\n")
            .contains("not a ClassAd expression")
    );
    assert!(refusal("executable = m\n").contains("no `queue`"));
    assert!(refusal("executable = m\nqueue 10001\n").contains("at most 10000"));
    assert!(
        refusal("include : other.sub\nexecutable = m\nqueue\n")
            .contains("`include` is not read here")
    );
    let long = format!("executable = m\n+{} = 1\nqueue\n", "A".repeat(300));
    assert!(
        refusal(&long).contains("job attribute name"),
        "{}",
        refusal(&long)
    );
    // Ignored commands and user macros are no mistake.
    assert_eq!(
        refusal("executable = m\ncopy_to_spool = false\nmy_macro = 3\nqueue\n"),
        "accepted 1 procs"
    );
}

#[test]
fn a_carmi_file_keeps_its_classes_and_copies() {
    let p = procs(
        "executable = m\nn = 4\nclass_name = fast\nmachine_count = 1..$(n)\nqueue\nclass_name = slow\nqueue\n",
    );
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].classes.len(), 2);
    assert_eq!(p[0].classes[0].max, 4);
    let p = procs("executable = m\narguments = $(Process)\nmachine_count = 2\nqueue 3\n");
    assert_eq!(p.len(), 3);
    assert_eq!(p[2].arguments, ["2"]);
    assert!(
        refusal("executable = m\nmachine_count = 2\nqueue x in (a)\n")
            .contains("only `queue` and `queue N`")
    );
}

#[test]
fn thousands_of_procs_are_read_in_one_pass() {
    let c = parse_cluster(
        "j",
        "executable = m\narguments = $(ProcId)\nqueue 2395\n",
        &env(),
    )
    .unwrap();
    assert_eq!(c.procs.len(), 2395);
    assert_eq!(c.procs[2394].arguments, ["2394"]);
}
