//! The local RM's `/metrics` page (`--metrics-addr`, the configuration's
//! `metrics_addr`; off by default): this machine's slots, processes, owner
//! state, policy effects and staging bytes in Prometheus' text format
//! (`docs/metrics.md`).
//!
//! Plain HTTP/1.1, `GET /metrics` only, one request per connection: a
//! local RM has no pool key to check a scraper's token with, and these
//! numbers name no job or user, so the page is open to whoever reaches the
//! address; bind it to loopback or an address a firewall keeps to the
//! monitoring host. The driver writes the page on its own task
//! ([`Input::Metrics`]), so it is one consistent moment of the core.

use std::time::Duration;

use carmi_api::exposition::{CONTENT_TYPE, Exposition, Kind};
use carmi_local_core::metrics::{EFFECTS, Metrics};
use carmi_local_core::policy::{Activity, MachineState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::Error;
use crate::input::Input;

/// Most bytes of a request's head read: a scraper's is a few hundred.
const MAX_HEAD: usize = 8 * 1024;

/// How long a connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` if one is configured.
pub(crate) async fn bind(addr: Option<&str>) -> Result<Option<TcpListener>, Error> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: format!("{addr} (metrics_addr)"),
            source,
        })?;
    if let Ok(bound) = listener.local_addr() {
        tracing::info!(%bound, "metrics at http://{bound}/metrics");
    }
    Ok(Some(listener))
}

/// Serves the page on `listener` until the driver is gone.
pub(crate) fn serve(listener: Option<TcpListener>, inputs: mpsc::Sender<Input>) {
    let Some(listener) = listener else { return };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(answer(stream, inputs.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("metrics: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                () = inputs.closed() => return,
            }
        }
    });
}

/// Reads one request and answers it.
async fn answer(mut stream: TcpStream, inputs: mpsc::Sender<Input>) {
    let Ok(Some(head)) = tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await else {
        return;
    };
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let (tx, rx) = oneshot::channel();
            let page = match inputs.send(Input::Metrics(tx)).await {
                Ok(()) => rx.await.ok(),
                Err(_) => None,
            };
            match page {
                Some(page) => ("200 OK", CONTENT_TYPE, page),
                None => ("503 Service Unavailable", "text/plain", "stopping\n".into()),
            }
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain",
            "the local RM serves only /metrics here\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics only\n".into(),
        ),
    };
    let body = if method == "HEAD" {
        String::new()
    } else {
        body
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The request's head, up to its blank line; `None` if it does not come
/// whole within [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf).ok()
}

/// The page: the core's numbers `m`, the owner policy's state and
/// activity, and the bytes this machine served to peers.
pub(crate) fn render(
    m: &Metrics,
    (state, activity): (MachineState, Activity),
    served_bytes: u64,
) -> String {
    let mut e = Exposition::new();
    e.family(
        "carmi_local_slots",
        Kind::Gauge,
        "This machine's slots by state: idle, busy (a process runs), suspended (owner back), vacated (withdrawn for the owner).",
    );
    for (s, n) in &m.slots {
        e.sample("carmi_local_slots", &[("state", *s)], *n as f64);
    }
    e.family(
        "carmi_local_processes",
        Kind::Gauge,
        "Job processes here by stage (fetching the executable, launching, running).",
    );
    for (s, n) in &m.processes {
        e.sample("carmi_local_processes", &[("stage", *s)], *n as f64);
    }
    owner(&mut e, state, activity);
    e.family(
        "carmi_local_policy_effects_total",
        Kind::Counter,
        "Owner policy transitions carried out since the start, by effect.",
    );
    for (i, (_, name)) in EFFECTS.iter().enumerate() {
        let n = m.counters.policy_effects[i] as f64;
        e.sample("carmi_local_policy_effects_total", &[("effect", *name)], n);
    }
    e.family(
        "carmi_local_staging_bytes_total",
        Kind::Counter,
        "Bytes of executables since the start: staged in and stored here, served to peers, uploaded by applications here.",
    )
    .sample(
        "carmi_local_staging_bytes_total",
        &[("direction", "in")],
        m.counters.staged_in_bytes as f64,
    )
    .sample(
        "carmi_local_staging_bytes_total",
        &[("direction", "served")],
        served_bytes as f64,
    )
    .sample(
        "carmi_local_staging_bytes_total",
        &[("direction", "uploaded")],
        m.counters.uploaded_bytes as f64,
    );
    e.single(
        "carmi_local_processes_exited_total",
        Kind::Counter,
        "Job processes that exited here since the start.",
        m.counters.processes_exited as f64,
    )
    .single(
        "carmi_local_applications",
        Kind::Gauge,
        "Application connections open to this local RM.",
        m.apps as f64,
    )
    .single(
        "carmi_local_registered",
        Kind::Gauge,
        "1 while registered with the global RM.",
        f64::from(u8::from(m.registered)),
    )
    .single(
        "carmi_local_backlog_messages",
        Kind::Gauge,
        "Messages kept for the global RM while it is away.",
        m.backlog as f64,
    );
    e.finish()
}

/// The owner policy's state and activity, 1 for the current ones.
fn owner(e: &mut Exposition, state: MachineState, activity: Activity) {
    let states = [
        MachineState::Owner,
        MachineState::Unclaimed,
        MachineState::Claimed,
        MachineState::Preempting,
    ];
    e.family(
        "carmi_local_owner_state",
        Kind::Gauge,
        "The owner policy's machine state (HTCondor's State): 1 for the current one.",
    );
    for s in states {
        let now = f64::from(u8::from(s == state));
        e.sample("carmi_local_owner_state", &[("state", s.name())], now);
    }
    let activities = [
        Activity::Idle,
        Activity::Busy,
        Activity::Suspended,
        Activity::Vacating,
        Activity::Killing,
    ];
    e.family(
        "carmi_local_owner_activity",
        Kind::Gauge,
        "The owner policy's activity (HTCondor's Activity): 1 for the current one.",
    );
    for a in activities {
        let now = f64::from(u8::from(a == activity));
        e.sample("carmi_local_owner_activity", &[("activity", a.name())], now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page server on loopback whose driver answers `page`; its address.
    async fn server(page: &'static str) -> String {
        let listener = bind(Some("127.0.0.1:0")).await.unwrap().unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, mut rx) = mpsc::channel(4);
        serve(Some(listener), tx);
        tokio::spawn(async move {
            while let Some(input) = rx.recv().await {
                if let Input::Metrics(reply) = input {
                    let _ = reply.send(page.to_string());
                }
            }
        });
        addr
    }

    /// What the server answers `request`.
    async fn ask(addr: &str, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    #[tokio::test]
    async fn get_metrics_is_answered_from_the_driver_and_nothing_else_is() {
        let addr = server("carmi_local_registered 1\n").await;
        let ok = ask(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE), "{ok}");
        assert!(ok.ends_with("\r\n\r\ncarmi_local_registered 1\n"), "{ok}");
        let head = ask(&addr, b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n").await;
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let other = ask(&addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = ask(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        // A head that never ends within the bound gets no answer.
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        assert_eq!(ask(&addr, &huge).await, "");
    }

    #[test]
    fn the_page_shows_the_core_s_numbers_and_the_owner_s_state() {
        let mut m = Metrics {
            slots: vec![("idle", 1), ("busy", 2), ("suspended", 0), ("vacated", 0)],
            processes: vec![("fetching", 0), ("launching", 0), ("running", 2)],
            registered: true,
            ..Metrics::default()
        };
        m.counters.policy_effects[2] = 4;
        m.counters.staged_in_bytes = 1000;
        let page = render(&m, (MachineState::Claimed, Activity::Busy), 77);
        for line in [
            "carmi_local_slots{state=\"busy\"} 2",
            "carmi_local_processes{stage=\"running\"} 2",
            "carmi_local_owner_state{state=\"Claimed\"} 1",
            "carmi_local_owner_state{state=\"Owner\"} 0",
            "carmi_local_owner_activity{activity=\"Busy\"} 1",
            "carmi_local_policy_effects_total{effect=\"suspend\"} 4",
            "carmi_local_staging_bytes_total{direction=\"in\"} 1000",
            "carmi_local_staging_bytes_total{direction=\"served\"} 77",
            "carmi_local_registered 1",
        ] {
            assert!(page.lines().any(|l| l == line), "no `{line}` in\n{page}");
        }
        let doc = include_str!("../../docs/metrics.md");
        for name in (page.lines()).filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = name.split(' ').next().unwrap_or_default();
            assert!(
                doc.contains(&format!("| `{name}` |")),
                "{name} is not in docs/metrics.md"
            );
        }
    }
}
