//! `carmi ssh_to_job JOB`: HTCondor's `condor_ssh_to_job`, which opens a
//! shell in a running job's sandbox on its machine. Not available in this
//! pool yet: the command exists so that an HTCondor user who types it
//! learns why and what to use instead, rather than "unrecognized subcommand".

use anyhow::bail;
use clap::Args;

/// `carmi ssh_to_job` options, as `condor_ssh_to_job` takes them.
#[derive(Args)]
pub struct SshToJobArgs {
    /// The job: `C` or `C.P` (as `carmi q` prints it)
    job: String,
    /// A command to run there instead of a shell
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Refuses, saying what is missing and what to use instead.
pub fn run(args: SshToJobArgs) -> anyhow::Result<()> {
    let job = &args.job;
    let what = if args.command.is_empty() {
        "a shell"
    } else {
        "a command"
    };
    bail!(
        "ssh_to_job {job}: cannot open {what} in the job's sandbox: the local RMs of this pool do \
         not yet run interactive sessions for users (a job's machine lends it only the job's own \
         processes). Instead: `carmi logs -f {job}` follows its master's output (--stderr its \
         error), `carmi events -f {job}` its events, `carmi q -better-analyze {job}` why it \
         waits; a job can also write what it sees to its output"
    )
}
