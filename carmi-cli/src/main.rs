//! The `carmi` binary: the command line of the `carmi_cli` library.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(carmi_cli::run(std::env::args_os().collect(), None))
}
