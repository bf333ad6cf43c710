//! A worker for WoDi's own tests: it answers each step with the init data,
//! the current cycle's begin data and the step's data, so that tests can
//! check that every worker got what the master sent before its steps.
//! A step whose data is `crash` kills the worker (a poison step); `sleep MS`
//! sleeps first; `pid DIR MS` creates the file `DIR/PID-STEP`, then sleeps;
//! `work MS` emulates MS milliseconds of work on a speed-1 host: it sleeps
//! MS / `Speed`, the speed in the machine ad (`CARMI_MACHINE_AD`; 1 without one);
//! `who MS` does the same work and answers with this worker's command line
//! (executable name and arguments, WoDi's own left out), so that a test can
//! tell which class's worker computed a step.

fn main() -> anyhow::Result<()> {
    use std::cell::RefCell;
    use std::rc::Rc;
    let init = Rc::new(RefCell::new(String::new()));
    let cycle = Rc::new(RefCell::new(String::new()));
    let (i2, c2, i3, c3) = (init.clone(), cycle.clone(), init.clone(), cycle.clone());
    wodi::worker::Worker::new()
        .on_init(move |s: String| *i2.borrow_mut() = s)
        // `wodi::Pool`'s cycles carry no data (null).
        .on_begin_cycle(move |c, s: Option<String>| {
            *c2.borrow_mut() = format!("{c}:{}", s.unwrap_or_default())
        })
        .on_step(move |step, data: String| {
            if let Some(why) = data.strip_prefix("fail ") {
                return Err(why.to_string());
            }
            if data == "crash" {
                std::process::abort();
            }
            if let Some(rest) = data.strip_prefix("pid ") {
                let (dir, ms) = rest.rsplit_once(' ').ok_or("pid DIR MS")?;
                let pid = std::process::id();
                std::fs::write(format!("{dir}/{pid}-{}", step.0), b"")
                    .map_err(|e| format!("{e}"))?;
                let ms: u64 = ms.parse().map_err(|e| format!("{e}"))?;
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            let who = data.strip_prefix("who ");
            if let Some(ms) = data.strip_prefix("work ").or(who) {
                let ms: f64 = ms.parse().map_err(|e| format!("{e}"))?;
                let speed = std::env::var_os("CARMI_MACHINE_AD")
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .and_then(|ad| wodi::speed::score_from_ad(&ad, "Speed"))
                    .unwrap_or(1.0);
                std::thread::sleep(std::time::Duration::from_secs_f64(ms / 1000.0 / speed));
            }
            if let Some(ms) = data.strip_prefix("sleep ") {
                let ms: u64 = ms.parse().map_err(|e| format!("{e}"))?;
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            if who.is_some() {
                let mut argv = std::env::args();
                let exe = argv.next().unwrap_or_default();
                let exe = std::path::Path::new(&exe)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or(exe);
                let args: Vec<String> = argv
                    .filter(|a| !a.starts_with(wodi::proto::CONNECT_ARG))
                    .collect();
                return Ok(format!("{exe} {}", args.join(" ")).trim().to_string());
            }
            Ok(format!("{}|{}|{step}|{data}", i3.borrow(), c3.borrow()))
        })
        .run()
}
