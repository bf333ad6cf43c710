//! The README's program before `wodi::Pool` (`wodi-hello`), on the full
//! asynchronous API: compiled so that it stays true
//! (`cargo run -p wodi-examples --example readme` on a machine whose
//! environment names a pool: `CARMI_LOCAL`, `CARMI_SECRET_FILE`).

use wodi::StepId;
use wodi::master::{Master, MasterConfig, StepOutcome};

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        // A step: square a number.
        return wodi::worker::Worker::new()
            .on_step(|_, x: u64| Ok(x * x))
            .run();
    }
    tokio::runtime::Runtime::new()?.block_on(async {
        // Four hosts of any kind; the pool from CARMI_LOCAL and CARMI_SECRET_FILE.
        let cfg = MasterConfig::new(std::env::current_exe()?, vec![], "true", 4);
        let mut master = Master::init(cfg, &()).await?;
        for i in 0..100 {
            master.send_work(StepId(i), &i)?;
        }
        let mut sum = 0u64;
        for _ in 0..100 {
            match master.recv_result::<u64>().await? {
                StepOutcome::Done(_, y) => sum += y,
                StepOutcome::Failed(step, why) => anyhow::bail!("{step} failed: {why}"),
            }
        }
        let stats = master.complete().await?;
        println!("sum {sum}, efficiency {:.0}%", stats.efficiency * 100.0);
        Ok(())
    })
}
