//! A real Prometheus (Debian's `prometheus`) scrapes both daemons of a real
//! pool: the global RM's `/metrics` over HTTPS with a `read` token, as
//! `docs/metrics.md` tells an admin to configure it, and a local RM's
//! `--metrics-addr`; its HTTP API then answers the number of jobs `carmi q`
//! lists, and the local RM's slots. Without the `prometheus` binary the
//! test skips (fails under `CARMI_CI_REQUIRE_SERVICES=1`: `.ci/run`
//! installs it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use carmi_api::authz::Power;
use carmi_tests::skip::ready_unless;
use carmi_tests::{Pool, PoolOptions, TempDir};

/// A master that waits for its stop file, so that the jobs stay queued.
const MASTER: &str = "#!/bin/sh\nwhile [ ! -e \"$2\" ]; do sleep 0.1; done\n";

/// The `prometheus` executable, if installed.
fn prometheus() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/bin".into(), "/usr/sbin".into()]);
    dirs.map(|d| d.join("prometheus")).find(|p| p.is_file())
}

/// A port free now on loopback.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().unwrap().port()
}

/// The Prometheus server of the test, stopped with it.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `exe` with `config` (written to `dir`), its storage in `dir`.
    fn start(exe: &Path, dir: &Path, config: &str) -> Prometheus {
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).expect("write prometheus.yml");
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("prometheus.log");
        let child = Command::new(exe)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, addr }
    }

    /// The value of the instant query `query`, if it has one sample.
    fn value(&self, query: &str) -> Option<f64> {
        let q: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body = http_get(&self.addr, &format!("/api/v1/query?query={q}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        let [one] = &result[..] else { return None };
        one["value"][1].as_str()?.parse().ok()
    }
}

/// The body of `GET path` at `addr` in clear HTTP/1.0.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    // Prometheus answers in the request's version (HTTP/1.0 here).
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_string())
}

#[test]
fn prometheus_scrapes_both_daemons_and_counts_the_jobs_carmi_q_lists() {
    let missing = prometheus().is_none().then(|| {
        "no `prometheus` executable (Debian's package prometheus; .ci/run installs it)".to_string()
    });
    if !ready_unless("metrics", missing) {
        return;
    }
    let exe = prometheus().expect("checked above");
    let local_metrics = format!("127.0.0.1:{}", free_port());
    let options = PoolOptions {
        global_args: vec!["--http".into(), "127.0.0.1:0".into()],
        local_args: vec!["--metrics-addr".into(), local_metrics.clone()],
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("metrics", 2, &[vec![]], options);
    pool.wait_registered();
    let dashboard = pool.dashboard.clone().expect("the dashboard's address");
    let global = dashboard
        .trim_start_matches("https://")
        .trim_end_matches('/');
    let dir = TempDir::new("metrics");
    // A scraper's token: read power only, as docs/metrics.md says.
    let token = dir.path().join("prometheus.token");
    pool.token_file(&token, "prometheus", Power::Read, None, 3600);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: carmi-global\n\
         \x20   scheme: https\n\
         \x20   tls_config:\n      insecure_skip_verify: true\n\
         \x20   authorization:\n      type: Bearer\n      credentials_file: {}\n\
         \x20   static_configs:\n      - targets: ['{global}']\n\
         \x20 - job_name: carmi-local\n\
         \x20   static_configs:\n      - targets: ['{local_metrics}']\n",
        token.display()
    );
    let prom = Prometheus::start(&exe, dir.path(), &config);

    let stop = dir.path().join("stop");
    let submit = format!(
        "executable = master.sh\narguments = $(ProcId) {}\nqueue 3\n",
        stop.display()
    );
    let cluster = pool.submit_script(dir.path(), MASTER, &submit);
    // Prometheus' own token may only look: a hold with it is denied, and
    // the core counts the denial.
    let denied = pool
        .carmi_in(dir.path())
        .env("CARMI_TOKEN", &token)
        .args(["hold", &cluster])
        .output()
        .expect("run carmi hold");
    assert!(!denied.status.success(), "a read token held a job");
    let q = pool.run_ok(pool.carmi_in(dir.path()).args(["q", "--json"]));
    let listed = serde_json::from_str::<Vec<serde_json::Value>>(&q)
        .expect("q --json parses")
        .len();
    assert_eq!(listed, 3, "{q}");

    let logs = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    pool.wait_for(
        "Prometheus has scraped both daemons",
        Duration::from_secs(90),
        || {
            let up = |job: &str| prom.value(&format!("up{{job=\"{job}\"}}"));
            if up("carmi-global") == Some(1.0) && up("carmi-local") == Some(1.0) {
                return Ok(());
            }
            // Each target's health and last error, and Prometheus' log.
            let targets = http_get(&prom.addr, "/api/v1/targets").unwrap_or_default();
            Err(format!("targets: {targets}\nprometheus.log:\n{}", logs()))
        },
    );
    pool.wait_until(
        "Prometheus counts the jobs carmi q lists",
        Duration::from_secs(60),
        || prom.value("sum(carmi_jobs)") == Some(listed as f64),
    );
    let by_user = prom.value("sum(carmi_jobs{user=\"admin\"})");
    assert_eq!(by_user, Some(listed as f64), "{}", logs());
    let slots = prom.value("sum(carmi_local_slots{job=\"carmi-local\"})");
    assert_eq!(slots, Some(2.0), "{}", logs());
    let global_slots = prom.value("sum(carmi_slots)");
    assert_eq!(global_slots, Some(2.0), "{}", logs());
    let denials = prom.value("carmi_token_denials_total{at=\"request\"}");
    assert_eq!(denials, Some(1.0), "{}", logs());
    std::fs::write(&stop, "").expect("write the stop file");
}

#[test]
fn the_grafana_dashboard_asks_only_for_documented_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
    let text = std::fs::read_to_string(root.join("deploy/grafana/carmi.json")).expect("carmi.json");
    let board: serde_json::Value = serde_json::from_str(&text).expect("carmi.json is JSON");
    let panels = board["panels"].as_array().expect("panels");
    let mut asked = 0;
    for expr in panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
    {
        let mut rest = expr;
        while let Some(at) = rest.find("carmi_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // A histogram is documented by its family's name.
            let family = name.strip_suffix("_bucket").unwrap_or(&name);
            assert!(
                doc.contains(&format!("| `{family}` |")),
                "carmi.json asks for {name}, which docs/metrics.md does not list"
            );
            asked += 1;
            rest = &rest[at + name.len()..];
        }
    }
    assert!(asked >= 10, "the dashboard asks for {asked} metrics");
}
