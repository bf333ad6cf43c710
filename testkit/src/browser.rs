//! A headless Chromium (Debian's `chromium`, installed by `.ci/chromium.sh`)
//! driven over the DevTools protocol, for tests of the web dashboard.
//!
//! Why the DevTools protocol, spoken here over `tokio-tungstenite`, rather
//! than `--dump-dom` or a client crate: a test must watch one live page
//! change without a reload, which a one-shot dump cannot show; the few
//! commands needed (open a tab, evaluate JavaScript, take a screenshot) are
//! a handful of JSON messages, while the protocol crates (`chromiumoxide`,
//! `headless_chrome`) compile the whole generated protocol, minutes on a
//! loaded CI machine, and WebDriver needs a second service (chromedriver).
//!
//! The dashboard speaks HTTPS with a certificate its daemon made at start,
//! which no public authority signed: the browser is told to accept it
//! (`--ignore-certificate-errors`), as a person accepts it once. [`https`]
//! is the tests' HTTP client for the same pages, without a browser.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::TempDir;

/// Whether a test may skip when a service it needs is missing: not in CI,
/// whose `.ci/run` sets `CARMI_CI_REQUIRE_SERVICES=1`.
fn services_required() -> bool {
    std::env::var("CARMI_CI_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// How long one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// One headless Chromium with one tab, ended when dropped.
pub struct Browser {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    _profile: TempDir,
}

impl Browser {
    /// Starts `chromium` with a fresh profile and opens a tab of
    /// `width`x`height`. When `chromium` is not installed: prints `SKIP
    /// <test>: chromium not available (...)` and returns `None`, or panics
    /// with that message under `CARMI_CI_REQUIRE_SERVICES=1`.
    pub async fn launch(test: &str, width: u32, height: u32) -> Option<Browser> {
        let profile = TempDir::new("chromium");
        let spawned = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                // The dashboard's certificate is the pool's own (see above).
                "--ignore-certificate-errors",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "about:blank",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(profile.path().join("stderr.log")).expect("a log file"))
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let message = format!(
                    "SKIP {test}: chromium not available (cannot run `chromium`: {e}; .ci/chromium.sh installs it)"
                );
                assert!(!services_required(), "{message}");
                eprintln!("{message}");
                return None;
            }
        };
        let mut browser = Browser::attach(child, profile).await;
        let metrics =
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        browser
            .command("Emulation.setDeviceMetricsOverride", metrics)
            .await;
        Some(browser)
    }

    /// Connects to the browser `child` started with profile `profile` and
    /// opens a tab.
    async fn attach(mut child: Child, profile: TempDir) -> Browser {
        // Chromium writes its port and browser path there once it listens.
        let file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let url = loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if let [port, path] = text.lines().collect::<Vec<_>>()[..] {
                break format!("ws://127.0.0.1:{port}{path}");
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(profile.path().join("stderr.log"));
                panic!("chromium exited ({status}) before listening: {log:?}");
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap_or_else(|e| panic!("DevTools connection to {url}: {e}"));
        let mut browser = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 1,
            _profile: profile,
        };
        let target = browser
            .command("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].clone();
        let attached = browser
            .command(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser
    }

    /// Sends one DevTools command (to the tab once attached) and returns its
    /// result; panics on an error answer.
    pub async fn command(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .await
            .unwrap_or_else(|e| panic!("DevTools {method}: {e}"));
        let deadline = tokio::time::Instant::now() + COMMAND_TIMEOUT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.ws.next()).await;
            let frame = match next {
                Ok(Some(Ok(frame))) => frame,
                Ok(other) => panic!("DevTools connection ended during {method}: {other:?}"),
                Err(_) => panic!("DevTools {method} unanswered after {COMMAND_TIMEOUT:?}"),
            };
            let Message::Text(text) = frame else { continue };
            let answer: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
            // Events (no id) and other answers are not waited for.
            if answer["id"] != json!(id) {
                continue;
            }
            if let Some(error) = answer.get("error") {
                panic!("DevTools {method} failed: {error}");
            }
            return answer["result"].clone();
        }
    }

    /// Opens `url` in the tab and waits until its document has loaded.
    pub async fn goto(&mut self, url: &str) {
        self.command("Page.navigate", json!({"url": url})).await;
        self.wait_for("document.readyState === 'complete'", "the page to load")
            .await;
    }

    /// The value of the JavaScript expression `js` in the page (awaited if
    /// it is a promise).
    pub async fn eval(&mut self, js: &str) -> Value {
        let params = json!({"expression": js, "returnByValue": true, "awaitPromise": true});
        let r = self.command("Runtime.evaluate", params).await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("JavaScript `{js}` threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits (at most a minute) until `js` is truthy in the page, and
    /// returns its value; panics naming `what` otherwise.
    pub async fn wait_for(&mut self, js: &str, what: &str) -> Value {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let v = self.eval(js).await;
            let truthy =
                !matches!(v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Writes a PNG of the tab's viewport to `path`.
    pub async fn screenshot(&mut self, path: &Path) -> PathBuf {
        let shot = self
            .command("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let data = shot["data"].as_str().expect("screenshot data");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64 PNG");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path.to_path_buf()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The renderer and other helpers leave when their browser does.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends the HTTP request `head` (whole, with its blank line) over TLS to
/// the dashboard at `url` (`https://HOST:PORT/...`, or `HOST:PORT`), and
/// returns everything it answers: what a browser would get. Blocking (on a
/// thread of its own), so that a test may call it anywhere.
pub fn https(url: &str, head: &str) -> String {
    let addr = url.trim_start_matches("https://");
    let addr = addr.split('/').next().unwrap_or(addr).to_string();
    let head = head.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let tcp = TcpStream::connect(&addr)
                .await
                .unwrap_or_else(|e| panic!("connect to the dashboard at {addr}: {e}"));
            let mut s = carmi_api::tls::connect(tcp)
                .await
                .unwrap_or_else(|e| panic!("TLS with the dashboard at {addr}: {e}"));
            s.writer.write_all(head.as_bytes()).await.expect("send");
            s.writer.flush().await.expect("send");
            let mut out = Vec::new();
            // What arrived stays in `out` if the server closes without
            // TLS's close_notify once its answer is whole.
            let read = s.reader.read_to_end(&mut out);
            let _ = tokio::time::timeout(COMMAND_TIMEOUT, read).await;
            String::from_utf8_lossy(&out).into_owned()
        })
    })
    .join()
    .expect("the HTTPS client thread")
}
