//! The generic command worker: each step's data is a shell command line, its
//! standard output is the step's result (see `wodi::cmd`).

fn main() -> anyhow::Result<()> {
    wodi::worker::Worker::new()
        .on_step_raw(|_, line| wodi::cmd::run_command(line))
        .run()
}
