//! `carmi-netns`: test hosts behind a real network boundary, by hand (root).
//!
//! - `carmi-netns up N`: makes N hosts (network namespaces on a bridge) and
//!   keeps them; prints each host's namespace, address and link.
//! - `carmi-netns pool N`: a global RM and N local RMs on N+1 hosts, until
//!   Enter (or end of input); prints how to reach them.
//! - `carmi-netns cut K I` / `restore K I`: host I of net K off or on again.
//! - `carmi-netns down K|all`: removes net K (or every net), whoever made it.
//! - `carmi-netns sweep`: removes the nets of processes that are gone.

use std::process::ExitCode;

use carmi_testkit::netns::{self, Net};

const USAGE: &str = "usage: carmi-netns up N | pool N | cut K I | restore K I | down K|all | sweep";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(why) = netns::missing() {
        eprintln!("carmi-netns: {why}");
        return ExitCode::from(2);
    }
    let number = |s: &str| s.parse::<usize>().ok();
    match args.as_slice() {
        ["up", n] if number(n).is_some_and(|n| (1..=250).contains(&n)) => {
            let net = Net::create_for(number(n).unwrap_or(1), "manual");
            println!("net {} (bridge {}, {})", net.k, net.bridge(), net.gateway());
            for (i, h) in net.hosts.iter().enumerate() {
                println!("host {i}: netns {} address {} link {}", h.ns, h.ip, h.link);
            }
            println!("run in host I: ip netns exec cn{}hI COMMAND", net.k);
        }
        ["pool", n] if number(n).is_some_and(|n| (1..=249).contains(&n)) => {
            let options = carmi_testkit::PoolOptions {
                heartbeat_ms: 500,
                missed_heartbeats: 4,
                ..Default::default()
            };
            let pool =
                carmi_testkit::NetPool::start("netns-pool", 1, number(n).unwrap_or(1), &options);
            pool.wait_registered(std::time::Duration::from_secs(60));
            println!("net {}: global RM {}", pool.net.k, pool.global_addr);
            for l in &pool.locals {
                println!(
                    "{} on {}: applications at {}",
                    l.name, pool.net.hosts[l.host].ns, l.app_addr
                );
            }
            println!(
                "export CARMI_POOL={} CARMI_SECRET={} CARMI_TOKEN={}",
                pool.global_addr,
                pool.secret_path.display(),
                pool.admin_token.display()
            );
            println!("press Enter to stop and remove everything");
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        }
        [what @ ("cut" | "restore"), k, i] => {
            let link = format!("cn{k}h{i}");
            let state = if *what == "cut" { "down" } else { "up" };
            let status = std::process::Command::new("ip")
                .args(["link", "set", &link, state])
                .status();
            if !status.is_ok_and(|s| s.success()) {
                eprintln!("carmi-netns: cannot set link {link} {state}");
                return ExitCode::FAILURE;
            }
        }
        ["down", "all"] => {
            for k in 1..=250u8 {
                for e in netns::teardown(k) {
                    eprintln!("carmi-netns: {e}");
                }
            }
        }
        ["down", k] if k.parse::<u8>().is_ok() => {
            let failed = netns::teardown(k.parse().unwrap_or(0));
            for e in &failed {
                eprintln!("carmi-netns: {e}");
            }
            if !failed.is_empty() {
                return ExitCode::FAILURE;
            }
        }
        ["sweep"] => netns::sweep(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
