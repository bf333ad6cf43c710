//! Every command of HTCondor's submit language for the vanilla universe, by
//! name (and by the attribute spellings HTCondor also accepts:
//! `RequestMemory`, `ShouldTransferFiles`, `PeriodicHold`...): what it means
//! here, or why it is refused, or why it is accepted and ignored. A key that
//! is no command is a user macro (`dir = /x`), as in HTCondor. docs/submit.md
//! lists them all.

/// How a value is written into the job ad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A ClassAd expression, checked.
    Expr,
    /// Text as written, stored as a ClassAd string.
    Str,
    /// Text, stored as a ClassAd string without its surrounding double quotes.
    Quoted,
    /// `true` or `false`.
    Bool,
    /// A whole number.
    Int,
    /// A number.
    Real,
}

/// What a command is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// A key of the job (`executable`, `arguments`...): canonical name.
    Job(&'static str),
    /// A key of the resource class a `queue` closes.
    Class(&'static str),
    /// A command read by [`crate::submit_condor::Extras`]: canonical name.
    Condor(&'static str),
    /// A job attribute under HTCondor's name.
    Attr(&'static str, Kind),
    /// Refused, with the reason.
    Refuse(&'static str),
    /// Accepted and ignored, with the reason (docs/submit.md).
    Ignore(&'static str),
}

const CONTAINERS: &str = "containers are not run by this pool; the master runs as a plain process on the machine (use an executable that starts your container runtime, if the machines have one)";
const GRID: &str =
    "the grid universe is not run by this pool: jobs are not forwarded to other batch systems";
const VM: &str = "virtual machines are not run by this pool";
const JAVA: &str =
    "the java universe is not run here: submit a script that runs `java` as the executable";
const STANDARD: &str = "the standard universe (remote system calls) does not exist here, nor in HTCondor since version 9";
const CRON: &str = "repeating jobs (crondor) are not run here: submit from cron instead";
const DEFERRAL: &str =
    "deferred starts are not supported here: submit at the time the job should start";
const OAUTH: &str = "credentials from OAuth services are not handled by this pool";
const PLUGINS: &str = "file transfer plugins and URLs are not handled by this pool: files travel from the submit machine";
const WINDOWS: &str = "Windows-only; machines here run Linux";
const TUNING: &str = "a tuning knob of HTCondor's own daemons, with no counterpart here";

/// `(names, meaning)`: the first name is the canonical one; the others are
/// the spellings HTCondor accepts too, all lower case.
const TABLE: &[(&[&str], Cmd)] = &[
    (&["executable"], Cmd::Job("executable")),
    (&["arguments", "args"], Cmd::Job("arguments")),
    (&["output", "out"], Cmd::Job("output")),
    (&["error", "err"], Cmd::Job("error")),
    (
        &["transfer_input_files", "transferinput"],
        Cmd::Job("transfer_input_files"),
    ),
    (&["environment", "env"], Cmd::Job("environment")),
    (&["on_impossible"], Cmd::Job("on_impossible")),
    (&["class_name"], Cmd::Class("class_name")),
    (&["requirements"], Cmd::Class("requirements")),
    (&["rank"], Cmd::Class("rank")),
    (&["machine_count"], Cmd::Class("machine_count")),
    (&["universe"], Cmd::Condor("universe")),
    (
        &["request_cpus", "requestcpus"],
        Cmd::Condor("request_cpus"),
    ),
    (
        &["request_memory", "requestmemory"],
        Cmd::Condor("request_memory"),
    ),
    (
        &["request_disk", "requestdisk"],
        Cmd::Condor("request_disk"),
    ),
    (
        &["request_gpus", "requestgpus"],
        Cmd::Condor("request_gpus"),
    ),
    (&["batch_name", "jobbatchname"], Cmd::Condor("jobbatchname")),
    (
        &["initialdir", "initial_dir", "iwd"],
        Cmd::Condor("initialdir"),
    ),
    (&["log", "userlog"], Cmd::Condor("log")),
    (
        &["should_transfer_files", "shouldtransferfiles"],
        Cmd::Condor("should_transfer_files"),
    ),
    (
        &["when_to_transfer_output", "whentotransferoutput"],
        Cmd::Condor("when_to_transfer_output"),
    ),
    (
        &["transfer_output_files", "transferoutput"],
        Cmd::Condor("transfer_output_files"),
    ),
    (&["master_requirements"], Cmd::Condor("master_requirements")),
    (&["max_start_failures"], Cmd::Condor("max_start_failures")),
    (
        &["checkpoint_exit_code", "successcheckpointexitcode"],
        Cmd::Condor("checkpoint_exit_code"),
    ),
    (
        &["transfer_checkpoint_files"],
        Cmd::Condor("transfer_checkpoint_files"),
    ),
    (
        &["notification", "jobnotification"],
        Cmd::Condor("notification"),
    ),
    (
        &["concurrency_limits", "concurrencylimits"],
        Cmd::Condor("concurrency_limits"),
    ),
    (&["getenv"], Cmd::Attr("GetEnv", Kind::Str)),
    (
        &["notify_user", "notifyuser"],
        Cmd::Attr("NotifyUser", Kind::Str),
    ),
    (
        &["stream_output", "streamout"],
        Cmd::Attr("StreamOut", Kind::Bool),
    ),
    (
        &["stream_error", "streamerr"],
        Cmd::Attr("StreamErr", Kind::Bool),
    ),
    (
        &["stream_input", "streamin"],
        Cmd::Attr("StreamIn", Kind::Bool),
    ),
    (
        &["periodic_hold", "periodichold"],
        Cmd::Attr("PeriodicHold", Kind::Expr),
    ),
    (
        &["periodic_hold_reason", "periodicholdreason"],
        Cmd::Attr("PeriodicHoldReason", Kind::Expr),
    ),
    (
        &["periodic_hold_subcode", "periodicholdsubcode"],
        Cmd::Attr("PeriodicHoldSubCode", Kind::Expr),
    ),
    (
        &["periodic_release", "periodicrelease"],
        Cmd::Attr("PeriodicRelease", Kind::Expr),
    ),
    (
        &["periodic_remove", "periodicremove"],
        Cmd::Attr("PeriodicRemove", Kind::Expr),
    ),
    (
        &["periodic_vacate", "periodicvacate"],
        Cmd::Attr("PeriodicVacate", Kind::Expr),
    ),
    (
        &["on_exit_hold", "onexithold"],
        Cmd::Attr("OnExitHold", Kind::Expr),
    ),
    (
        &["on_exit_hold_reason", "onexitholdreason"],
        Cmd::Attr("OnExitHoldReason", Kind::Expr),
    ),
    (
        &["on_exit_hold_subcode", "onexitholdsubcode"],
        Cmd::Attr("OnExitHoldSubCode", Kind::Expr),
    ),
    (
        &["on_exit_remove", "onexitremove"],
        Cmd::Attr("OnExitRemove", Kind::Expr),
    ),
    (
        &["require_gpus", "requiregpus"],
        Cmd::Attr("RequireGPUs", Kind::Expr),
    ),
    (
        &["gpus_minimum_capability", "gpusmincapability"],
        Cmd::Attr("GPUsMinCapability", Kind::Real),
    ),
    (
        &["gpus_maximum_capability", "gpusmaxcapability"],
        Cmd::Attr("GPUsMaxCapability", Kind::Real),
    ),
    (
        &["gpus_minimum_memory", "gpusminmemory"],
        Cmd::Attr("GPUsMinMemory", Kind::Int),
    ),
    (
        &["gpus_minimum_runtime", "gpusminruntime"],
        Cmd::Attr("GPUsMinRuntime", Kind::Real),
    ),
    (
        &["transfer_output_remaps", "transferoutputremaps"],
        Cmd::Attr("TransferOutputRemaps", Kind::Quoted),
    ),
    (
        &["transfer_executable", "transferexecutable"],
        Cmd::Attr("TransferExecutable", Kind::Bool),
    ),
    (&["transfer_input"], Cmd::Attr("TransferIn", Kind::Bool)),
    (&["transfer_output"], Cmd::Attr("TransferOut", Kind::Bool)),
    (&["transfer_error"], Cmd::Attr("TransferErr", Kind::Bool)),
    (
        &["accounting_group", "acctgroup"],
        Cmd::Attr("AcctGroup", Kind::Str),
    ),
    (
        &["accounting_group_user", "acctgroupuser"],
        Cmd::Attr("AcctGroupUser", Kind::Str),
    ),
    (&["x509userproxy"], Cmd::Attr("X509UserProxy", Kind::Str)),
    (
        &["max_materialize", "jobmaterializelimit"],
        Cmd::Attr("JobMaterializeLimit", Kind::Int),
    ),
    (
        &["max_idle", "jobmaterializemaxidle", "materialize_max_idle"],
        Cmd::Attr("JobMaterializeMaxIdle", Kind::Int),
    ),
    (&["hold"], Cmd::Attr("HoldAtSubmit", Kind::Bool)),
    (
        &["priority", "prio", "jobprio"],
        Cmd::Attr("JobPrio", Kind::Int),
    ),
    (
        &["nice_user", "niceuser"],
        Cmd::Attr("NiceUser", Kind::Bool),
    ),
    (
        &["description", "jobdescription"],
        Cmd::Attr("JobDescription", Kind::Str),
    ),
    (&["input", "in", "stdin"], Cmd::Attr("In", Kind::Str)),
    (
        &["max_retries", "jobmaxretries"],
        Cmd::Attr("JobMaxRetries", Kind::Int),
    ),
    (
        &["success_exit_code", "jobsuccessexitcode"],
        Cmd::Attr("JobSuccessExitCode", Kind::Int),
    ),
    (&["retry_until"], Cmd::Attr("RetryUntil", Kind::Expr)),
    (
        &["leave_in_queue", "leavejobinqueue"],
        Cmd::Attr("LeaveJobInQueue", Kind::Expr),
    ),
    (
        &["want_graceful_removal", "wantgracefulremoval"],
        Cmd::Attr("WantGracefulRemoval", Kind::Expr),
    ),
    (
        &["job_max_vacate_time", "jobmaxvacatetime"],
        Cmd::Attr("JobMaxVacateTime", Kind::Expr),
    ),
    (
        &["max_job_retirement_time", "maxjobretirementtime"],
        Cmd::Attr("MaxJobRetirementTime", Kind::Expr),
    ),
    (
        &["allowed_execute_duration", "allowedexecuteduration"],
        Cmd::Attr("AllowedExecuteDuration", Kind::Int),
    ),
    (
        &["allowed_job_duration", "allowedjobduration"],
        Cmd::Attr("AllowedJobDuration", Kind::Int),
    ),
    (&["coresize", "core_size"], Cmd::Attr("CoreSize", Kind::Int)),
    (&["kill_sig", "killsig"], Cmd::Attr("KillSig", Kind::Str)),
    (&["remove_kill_sig"], Cmd::Attr("RemoveKillSig", Kind::Str)),
    (&["hold_kill_sig"], Cmd::Attr("HoldKillSig", Kind::Str)),
    (
        &["job_lease_duration"],
        Cmd::Attr("JobLeaseDuration", Kind::Int),
    ),
    (
        &["job_machine_attrs"],
        Cmd::Attr("JobMachineAttrs", Kind::Str),
    ),
    (
        &["job_ad_information_attrs"],
        Cmd::Attr("JobAdInformationAttrs", Kind::Str),
    ),
    (
        &["submit_event_notes"],
        Cmd::Attr("SubmitEventNotes", Kind::Str),
    ),
    (
        &["max_transfer_input_mb"],
        Cmd::Attr("MaxTransferInputMB", Kind::Expr),
    ),
    (
        &["max_transfer_output_mb"],
        Cmd::Attr("MaxTransferOutputMB", Kind::Expr),
    ),
    (
        &["preserve_relative_paths"],
        Cmd::Attr("PreserveRelativePaths", Kind::Bool),
    ),
    (
        &["erase_output_and_error_on_restart"],
        Cmd::Attr("EraseOutputAndErrorOnRestart", Kind::Bool),
    ),
    (
        &["want_checkpoint_signal"],
        Cmd::Attr("WantCheckpointSignal", Kind::Bool),
    ),
    (&["checkpoint_sig"], Cmd::Attr("CheckpointSig", Kind::Str)),
    (
        &[
            "docker_image",
            "container_image",
            "docker_network_type",
            "docker_override_entrypoint",
            "container_service_names",
            "container_target_dir",
            "transfer_container",
            "docker_pull_policy",
            "singularity_image",
        ],
        Cmd::Refuse(CONTAINERS),
    ),
    (
        &[
            "grid_resource",
            "globus_rsl",
            "globus_resubmit",
            "globus_rematch",
            "batch_queue",
            "batch_project",
            "batch_runtime",
            "batch_extra_submit_args",
            "arc_rte",
            "arc_resources",
            "ec2_ami_id",
            "ec2_instance_type",
            "ec2_access_key_id",
            "ec2_secret_access_key",
            "gce_image",
            "gce_machine_type",
            "azure_image",
            "azure_size",
            "cream_attributes",
            "nordugrid_rsl",
            "grid_type",
        ],
        Cmd::Refuse(GRID),
    ),
    (
        &[
            "vm_type",
            "vm_memory",
            "vm_disk",
            "vm_networking",
            "vm_networking_type",
            "vm_vcpus",
            "vm_checkpoint",
            "vm_macaddr",
            "vm_no_output_vm",
            "xen_kernel",
            "xen_initrd",
            "xen_root",
            "xen_kernel_params",
            "kvm_disk",
        ],
        Cmd::Refuse(VM),
    ),
    (&["jar_files", "java_vm_args"], Cmd::Refuse(JAVA)),
    (
        &[
            "want_remote_io",
            "compress_files",
            "fetch_files",
            "append_files",
            "local_files",
            "file_remaps",
            "buffer_files",
            "buffer_size",
            "buffer_block_size",
        ],
        Cmd::Refuse(STANDARD),
    ),
    (
        &[
            "cron_minute",
            "cron_hour",
            "cron_day_of_month",
            "cron_month",
            "cron_day_of_week",
            "cron_prep_time",
            "cron_window",
            "on_exit_remove_cron",
        ],
        Cmd::Refuse(CRON),
    ),
    (
        &["deferral_time", "deferral_window", "deferral_prep_time"],
        Cmd::Refuse(DEFERRAL),
    ),
    (
        &["use_oauth_services", "use_scitokens", "scitokens_file"],
        Cmd::Refuse(OAUTH),
    ),
    (
        &[
            "transfer_plugins",
            "output_destination",
            "checkpoint_destination",
            "transfer_input_urls",
        ],
        Cmd::Refuse(PLUGINS),
    ),
    (
        &[
            "run_as_owner",
            "load_profile",
            "rendezvousdir",
            "dont_encrypt_input_files",
            "dont_encrypt_output_files",
        ],
        Cmd::Ignore(WINDOWS),
    ),
    (
        &[
            "encrypt_input_files",
            "encrypt_output_files",
            "encrypt_execute_directory",
        ],
        Cmd::Ignore(
            "files travel over the pool's authenticated connections; per-file encryption adds nothing here",
        ),
    ),
    (
        &[
            "copy_to_spool",
            "skip_filechecks",
            "image_size",
            "stack_size",
            "keep_claim_idle",
            "next_job_start_delay",
            "match_list_length",
            "last_match_list_length",
            "want_io_proxy",
            "job_ad_update_interval",
            "manifest",
            "manifest_dir",
            "starter_debug",
            "starter_log",
            "ulog_execute_attrs",
            "log_xml",
            "dagman_log",
            "use_x509userproxy",
            "email_attributes",
            "want_name_tag",
        ],
        Cmd::Ignore(TUNING),
    ),
];

/// The meaning of command `key` (any case), or `None` for a user macro.
pub fn lookup(key: &str) -> Option<Cmd> {
    let k = key.trim();
    let lc = k.to_ascii_lowercase();
    if k.starts_with('+') || lc.starts_with("my.") {
        return Some(Cmd::Condor("+"));
    }
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&lc.as_str()))
        .map(|(_, c)| *c)
}

/// The one name of a command among its spellings (`+attr` for custom
/// attributes), lower case; the key itself for a user macro.
pub fn canonical(key: &str) -> String {
    let k = key.trim();
    let lc = k.to_ascii_lowercase();
    if let Some(rest) = k.strip_prefix('+') {
        return format!("+{}", rest.to_ascii_lowercase());
    }
    if let Some(rest) = lc.strip_prefix("my.") {
        return format!("+{rest}");
    }
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&lc.as_str()))
        .map_or(lc.clone(), |(names, _)| names[0].to_string())
}

/// The ClassAd text of a value of `kind`, or why it is not one.
pub fn attr_value(cmd: &str, kind: Kind, value: &str) -> Result<String, String> {
    let v = value.trim();
    match kind {
        Kind::Expr => {
            crate::bounds::check_len(cmd, v, crate::bounds::MAX_EXPRESSION_BYTES)
                .map_err(|e| e.to_string())?;
            classad::parse_expr(v).map_err(|e| {
                format!(
                    "{cmd}: not a ClassAd expression (column {}: {})",
                    e.column, e.message
                )
            })?;
            Ok(v.to_string())
        }
        Kind::Str | Kind::Quoted => {
            let s = match kind {
                Kind::Quoted => v
                    .strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .unwrap_or(v),
                _ => v,
            };
            crate::bounds::check_len(cmd, s, crate::bounds::MAX_EXPRESSION_BYTES)
                .map_err(|e| e.to_string())?;
            Ok(format!("{s:?}"))
        }
        Kind::Bool => match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "t" | "1" => Ok("true".into()),
            "false" | "no" | "f" | "0" => Ok("false".into()),
            _ => Err(format!("{cmd} = {v}: expected true or false")),
        },
        Kind::Int => v
            .parse::<i64>()
            .map(|n| n.to_string())
            .map_err(|_| format!("{cmd} = {v}: expected a whole number")),
        Kind::Real => v
            .parse::<f64>()
            .map(|_| v.to_string())
            .map_err(|_| format!("{cmd} = {v}: expected a number")),
    }
}
