//! `carmi completions SHELL` and `carmi man DIR`: what a shell and `man`
//! need, generated from the same clap definitions the command parses with,
//! so that completions and pages never drift from the options.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// `carmi completions` options.
#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for (bash, zsh, fish, elvish, powershell).
    shell: Shell,
}

/// `carmi man` options.
#[derive(Args)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// Prints the completion script for a shell on stdout, e.g.
/// `carmi completions bash > ~/.local/share/bash-completion/completions/carmi`.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "carmi", &mut std::io::stdout());
    Ok(())
}

/// Writes `carmi.1` and one page per subcommand (`carmi-submit.1`, ...)
/// into a directory, and lists what it wrote.
pub fn man(args: ManArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let cmd = crate::Cli::command();
    clap_mangen::generate_to(cmd, &args.dir)
        .with_context(|| format!("cannot write the pages into {}", args.dir.display()))?;
    let mut pages: Vec<String> = std::fs::read_dir(&args.dir)
        .with_context(|| format!("cannot list {}", args.dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("carmi") && n.ends_with(".1"))
        .collect();
    pages.sort();
    for page in pages {
        println!("{}", args.dir.join(page).display());
    }
    Ok(())
}
