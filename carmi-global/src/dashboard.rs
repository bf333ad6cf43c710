//! The global RM's web dashboard (`carmi-global --http ADDR`): one static
//! page (HTML, CSS and JavaScript in `dashboard/page.html`, built into the
//! binary), a read-only JSON API, and a server-sent event stream that
//! pushes every change of the pool or the queue to the page, which redraws
//! itself without a reload. `docs/dashboard.md` documents the API.
//!
//! The router task's loop stays as it is: one poller task asks it for a
//! [`Snapshot`] (what `Status` and `Queue` answer, computed on the router's
//! task as for `carmi status` and `carmi q`) twice a second while someone
//! watches and every five seconds otherwise (for the pool's curve); every
//! browser is then served from that one snapshot, so a hundred open pages
//! cost the router what one does. The JSON is built off the router's task.
//!
//! Access: only `GET` and `HEAD` (anything else is answered 405). With a
//! pool signing key, every request must carry a token of at least `read`
//! power (`Authorization: Bearer TOKEN`, the cookie `carmi_token`, or
//! `?token=TOKEN` on the page's own address, which the page turns into that
//! cookie): 401 without one, 403 with a bad one; an event stream ends when
//! its token is revoked or expires. Without a key only loopback is served (the daemon
//! refuses to listen elsewhere, and a request from elsewhere gets 403).
//!
//! Transport: HTTPS (TLS 1.3, a certificate made in memory at start), so
//! that tokens and the pool's state never cross the network in clear; clear
//! HTTP only on loopback and only when asked ([`Dashboard::bind_plain`],
//! `--http-plain`). See `dashboard/incoming.rs`.

pub mod incoming;
pub mod scrape;
pub mod timeline;
pub mod view;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Query as UrlQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use carmi_api::tls::Acceptor;
use futures_util::Stream;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use incoming::{Incoming, Peer};
pub use timeline::{JobTimeline, Timelines};
pub use view::{Snapshot, View, Viewer};

/// The page, embedded: no build step, no file to find at run time, nothing
/// fetched from the network by the browser.
pub const PAGE: &str = include_str!("dashboard/page.html");

/// How often the router is asked while a page or API client watches.
pub const WATCHED_PERIOD: Duration = Duration::from_millis(500);

/// How often it is asked otherwise (the pool's curve keeps going).
pub const UNWATCHED_PERIOD: Duration = Duration::from_secs(5);

/// What the dashboard asks the router, with the sender the answer goes to.
#[derive(Debug)]
pub enum Query {
    /// What `Status` and `Queue` answer; with `true` (someone watches or
    /// asked), every job's status and some waiting jobs explained (a pass
    /// over the pool each, on the router's task); with `false`, for the
    /// curve's and the timelines' own periodic view, a light snapshot
    /// ([`Snapshot::light`]).
    Snapshot(oneshot::Sender<Snapshot>, bool),
    /// Every online machine's name and whole ad (what `MachineAds`
    /// answers), for a ClassAd constraint.
    Ads(oneshot::Sender<Vec<(String, std::sync::Arc<str>)>>),
}

/// How the dashboard asks the router: `false` once the router is gone.
pub type Ask = Arc<dyn Fn(Query) -> bool + Send + Sync>;

/// Whether a token may read the pool, or why not (the pool's token
/// authority: `Authority::check_read`). The dashboard sits below the server
/// module and knows nothing of the authority but this.
pub type TokenCheck = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The latest view, as the poller published it.
#[derive(Clone)]
struct Published {
    /// Bumped when the view's JSON changed: streams send only then.
    version: u64,
    view: Arc<View>,
    /// The view's JSON, made once for every stream.
    json: Arc<String>,
    taken: Instant,
    /// When it was taken, seconds since the Unix epoch.
    view_time: u64,
    /// The core's counters at that time.
    counters: crate::metrics::CoreCounters,
}

/// What every request handler shares.
#[derive(Clone)]
struct Shared {
    views: watch::Sender<Published>,
    wake: Arc<Notify>,
    ask: Ask,
    auth: Option<TokenCheck>,
    /// Served over TLS: the token's cookie is `Secure` (a browser never
    /// sends it in clear, to this port or another).
    tls: bool,
    stop: watch::Receiver<bool>,
    /// Each job's hosts over time, kept by the poller.
    timelines: Arc<std::sync::Mutex<Timelines>>,
    /// `/metrics` is served without a token (`--metrics-public`).
    public_metrics: bool,
}

/// A bound, not yet serving, dashboard.
pub struct Dashboard {
    listener: TcpListener,
    auth: Option<TokenCheck>,
    /// The TLS side and its certificate's SHA-256 fingerprint; `None` for
    /// clear HTTP ([`Dashboard::bind_plain`]).
    tls: Option<(Acceptor, String)>,
    public_metrics: bool,
}

impl Dashboard {
    /// Binds `addr` (`HOST:PORT`) for HTTPS, with a certificate made now
    /// for the names `localhost`, `carmi-pool` and the address bound.
    /// Without `auth` (a pool without signing key) only a loopback address
    /// is accepted: nothing would keep others from reading the pool.
    pub async fn bind(addr: &str, auth: Option<TokenCheck>) -> Result<Dashboard, String> {
        let (listener, local) = listen("--http", addr, &auth).await?;
        let mut names = vec!["localhost".to_string(), "carmi-pool".to_string()];
        if !local.ip().is_unspecified() {
            names.push(local.ip().to_string());
        }
        let tls = Acceptor::generate_for(names).map_err(|e| format!("--http {addr}: {e}"))?;
        Ok(Dashboard {
            listener,
            auth,
            tls: Some(tls),
            public_metrics: false,
        })
    }

    /// Binds `addr` for HTTPS with a certificate of the pool's (the
    /// acceptor and fingerprint of [`carmi_api::webcert::load`]: the one
    /// `carmi pool init` made), the same at every start.
    pub async fn bind_with_cert(
        addr: &str,
        auth: Option<TokenCheck>,
        cert: (Acceptor, String),
    ) -> Result<Dashboard, String> {
        let (listener, _) = listen("--http", addr, &auth).await?;
        Ok(Dashboard {
            listener,
            auth,
            tls: Some(cert),
            public_metrics: false,
        })
    }

    /// Binds `addr` for clear HTTP: a loopback address only, for a browser
    /// on the same machine that cannot be told to accept the certificate
    /// (`--http-plain`; `docs/security.md` says what it gives up).
    pub async fn bind_plain(addr: &str, auth: Option<TokenCheck>) -> Result<Dashboard, String> {
        let (listener, local) = listen("--http-plain", addr, &auth).await?;
        if !local.ip().is_loopback() {
            return Err(format!(
                "--http-plain {addr}: clear HTTP would show tokens and the pool to the network; \
                 it serves only loopback (127.0.0.1 or [::1]): use --http for HTTPS"
            ));
        }
        Ok(Dashboard {
            listener,
            auth,
            tls: None,
            public_metrics: false,
        })
    }

    /// Serves `/metrics` to anyone who reaches the port, without a token
    /// (`--metrics-public`: for a Prometheus that cannot present one; the
    /// page and the API still need theirs). `docs/metrics.md` says what
    /// the numbers tell others.
    pub fn with_public_metrics(mut self, public: bool) -> Dashboard {
        self.public_metrics = public;
        self
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The page's address: `https://HOST:PORT/` (`http://` in clear).
    pub fn url(&self) -> std::io::Result<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        Ok(format!("{scheme}://{}/", self.local_addr()?))
    }

    /// The SHA-256 fingerprint of the certificate (`AB:CD:...`), to compare
    /// with what a browser shows; `None` in clear.
    pub fn fingerprint(&self) -> Option<&str> {
        self.tls.as_ref().map(|(_, f)| f.as_str())
    }

    /// Serves until `stop` turns true, asking the router through `ask`.
    pub async fn serve(self, ask: Ask, stop: watch::Receiver<bool>) {
        let first = Published {
            version: 0,
            view: Arc::new(Viewer::new().update(Snapshot::default(), 0)),
            json: Arc::new(String::new()),
            taken: Instant::now(),
            view_time: carmi_api::token::now_unix(),
            counters: Default::default(),
        };
        let (views, _) = watch::channel(first);
        let shared = Shared {
            views,
            wake: Arc::new(Notify::new()),
            ask: ask.clone(),
            auth: self.auth,
            tls: self.tls.is_some(),
            stop: stop.clone(),
            timelines: Default::default(),
            public_metrics: self.public_metrics,
        };
        tokio::spawn(poll(ask.clone(), shared.clone()));
        let app = Router::new()
            .route("/", get(index))
            .route("/api/view", get(api_view))
            .route("/api/machines", get(api_machines))
            .route("/api/jobs", get(api_jobs))
            .route("/api/timeline", get(api_timeline))
            .route("/api/events", get(events))
            .route("/metrics", get(metrics))
            .fallback(not_found)
            .layer(from_fn_with_state(shared.clone(), guard))
            .with_state(shared);
        let mut stopped = stop;
        let until = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let incoming = match Incoming::new(self.listener, self.tls.map(|(a, _)| a)) {
            Ok(i) => i,
            Err(e) => {
                warn!("the dashboard cannot serve: {e}");
                return;
            }
        };
        let service = app.into_make_service_with_connect_info::<Peer>();
        if let Err(e) = axum::serve(incoming, service)
            .with_graceful_shutdown(until)
            .await
        {
            warn!("the dashboard stopped: {e}");
        }
    }
}

/// Binds `addr` for `flag`, refusing a non-loopback address without `auth`.
async fn listen(
    flag: &str,
    addr: &str,
    auth: &Option<TokenCheck>,
) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("{flag} {addr}: cannot listen: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("{flag} {addr}: {e}"))?;
    if auth.is_none() && !local.ip().is_loopback() {
        return Err(format!(
            "{flag} {addr}: without a pool signing key (--pool-key) the dashboard has no \
             tokens to check and serves only loopback (127.0.0.1 or [::1])"
        ));
    }
    Ok((listener, local))
}

/// Asks the router for a snapshot at the pace of [`WATCHED_PERIOD`] or
/// [`UNWATCHED_PERIOD`] and publishes the view.
async fn poll(ask: Ask, shared: Shared) {
    let mut viewer = Viewer::new();
    let mut stop = shared.stop.clone();
    let mut version = 0;
    // Nobody asked yet: a restarted global RM's first router steps go to
    // what its machines and tools ask, not to a full view of the queue
    // (208 ms at 50,000 jobs, which the first `carmi q` waited for).
    let mut asked = false;
    loop {
        let (tx, rx) = oneshot::channel();
        // Unwatched and unasked, a light snapshot keeps the curve and the
        // timelines going and is not published: every reader asks for a
        // fresh view ([`fresh`]), which wakes this loop for a full one.
        let full = asked || shared.views.receiver_count() > 0;
        let taken = Instant::now();
        if !ask(Query::Snapshot(tx, full)) {
            return;
        }
        let Ok(snap) = rx.await else { return };
        let now = carmi_api::token::now_unix();
        if let Ok(mut t) = shared.timelines.lock() {
            t.update(&snap, now);
        }
        if full {
            let counters = snap.counters;
            let view = viewer.update(snap, now);
            let json = match serde_json::to_string(&view) {
                Ok(j) => j,
                Err(e) => {
                    warn!("the dashboard's view does not serialize: {e}");
                    String::new()
                }
            };
            shared.views.send_modify(|p| {
                if *p.json != json {
                    version += 1;
                    p.version = version;
                    p.json = Arc::new(json);
                }
                p.view = Arc::new(view);
                p.taken = taken;
                p.view_time = now;
                p.counters = counters;
            });
        } else {
            viewer.observe(&snap, now);
        }
        let period = if shared.views.receiver_count() > 0 {
            WATCHED_PERIOD
        } else {
            UNWATCHED_PERIOD
        };
        asked = tokio::select! {
            _ = tokio::time::sleep(period) => false,
            _ = shared.wake.notified() => true,
            _ = stop.wait_for(|s| *s) => return,
        };
    }
}

/// Refuses writes (405), and requests without the right to read (see the
/// module documentation), before any handler runs.
async fn guard(
    State(shared): State<Shared>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    req: Request,
    next: Next,
) -> Response {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let why = format!(
            "{} refused: the dashboard is read-only (GET and HEAD only); change the pool with `carmi`",
            req.method()
        );
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, HEAD")],
            why,
        )
            .into_response();
    }
    let public = shared.public_metrics && req.uri().path() == "/metrics";
    match &shared.auth {
        _ if public => {}
        None if !peer.ip().is_loopback() => {
            let why = "the dashboard of a pool without tokens serves only this machine (loopback)";
            return (StatusCode::FORBIDDEN, why).into_response();
        }
        None => {
            if let Err(why) = loopback_host(&req) {
                warn!(%peer, "dashboard request refused: {why}");
                return (StatusCode::FORBIDDEN, why).into_response();
            }
        }
        Some(auth) => {
            // In an address a token ends up in histories, logs and Referer
            // headers: only the page's own address takes it (to turn it into
            // a cookie at once), never the API's.
            let query = (req.uri().path() == "/")
                .then(|| req.uri().query())
                .flatten();
            let Some(token) = token_of(req.headers(), query) else {
                let why = "this dashboard needs a token of `read` power or more: send it as \
                           `Authorization: Bearer TOKEN`, in the cookie `carmi_token`, or open \
                           /?token=TOKEN once (`carmi token create --authz read`)";
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    why,
                )
                    .into_response();
            };
            if let Err(why) = auth(&token) {
                warn!(%peer, "dashboard request refused: {why}");
                return (StatusCode::FORBIDDEN, why).into_response();
            }
        }
    }
    next.run(req).await
}

/// A tokenless dashboard serves only requests that name this machine by a
/// loopback name: a page of another site whose name its DNS turns into
/// 127.0.0.1 (DNS rebinding) could otherwise read the pool from the user's
/// own browser, but that browser still sends the other site's name.
fn loopback_host(req: &Request) -> Result<(), String> {
    let host = (req.headers().get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    let loopback = name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    Err(format!(
        "Host `{host}` is not a loopback name: the dashboard of a pool without tokens answers \
         only requests addressed to localhost, 127.0.0.1 or [::1] (a guard against DNS \
         rebinding)"
    ))
}

/// The token a request carries: bearer header first, then the cookie, then
/// the query.
fn token_of(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = || {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix("carmi_token="))
    };
    let query = || query?.split('&').find_map(|kv| kv.strip_prefix("token="));
    let token = bearer.or_else(cookie).or_else(query)?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// `?token=` on the page's address.
#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// The page; opened with `?token=`, the token becomes a cookie (so the
/// event stream, which cannot carry headers, presents it too) and the
/// address loses it.
async fn index(State(shared): State<Shared>, UrlQuery(q): UrlQuery<TokenQuery>) -> Response {
    match q.token {
        Some(token)
            if !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic() && b != b';') =>
        {
            let secure = if shared.tls { "; Secure" } else { "" };
            let cookie = format!("carmi_token={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = cookie.parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            // Neither kept by a cache nor passed on as a Referer: the address
            // holds the token.
            let h = r.headers_mut();
            h.insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
            h.insert(
                header::REFERRER_POLICY,
                header::HeaderValue::from_static("no-referrer"),
            );
            r
        }
        _ => (
            [
                (header::CACHE_CONTROL, "no-store"),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
            Html(PAGE),
        )
            .into_response(),
    }
}

/// A view taken after this call began (or the latest, if the router does
/// not answer within 5 s): an API client that just changed the pool sees
/// its change. Requests at the same moment share one snapshot.
async fn fresh(shared: &Shared) -> Published {
    let asked = Instant::now();
    let mut rx = shared.views.subscribe();
    shared.wake.notify_one();
    let deadline = asked + Duration::from_secs(5);
    loop {
        let p = rx.borrow_and_update().clone();
        if p.taken >= asked {
            return p;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            _ => return p,
        }
    }
}

/// `/api/view`: machines (lost ones too), jobs and the pool's curve.
async fn api_view(State(shared): State<Shared>) -> Response {
    json(&*fresh(&shared).await.view)
}

/// `?constraint=` of `/api/machines`.
#[derive(serde::Deserialize)]
struct ConstraintQuery {
    constraint: Option<String>,
}

/// `/api/machines`: every machine with its state and slots; with
/// `?constraint=EXPR`, those online whose ad satisfies the ClassAd
/// expression (as `carmi status -constraint`).
async fn api_machines(
    State(shared): State<Shared>,
    UrlQuery(q): UrlQuery<ConstraintQuery>,
) -> Response {
    let view = fresh(&shared).await.view;
    let Some(text) = q.constraint.filter(|c| !c.trim().is_empty()) else {
        return json(&view.machines);
    };
    let expr = match classad::parse_expr(&text) {
        Ok(e) => e,
        Err(e) => {
            let why = format!(
                "constraint: not a ClassAd expression (column {}: {})",
                e.column, e.message
            );
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    let (tx, rx) = oneshot::channel();
    let Some(ads) = (shared.ask)(Query::Ads(tx)).then_some(rx) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the global RM is stopping").into_response();
    };
    let Ok(ads) = ads.await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the global RM is stopping").into_response();
    };
    // Parsing every ad is real work for a large pool: off the runtime's threads.
    let matching = tokio::task::spawn_blocking(move || {
        ads.into_iter()
            .filter(|(_, text)| {
                classad::ClassAd::parse_any(text)
                    .is_ok_and(|ad| ad.eval_expr(&expr, None).is_true())
            })
            .map(|(name, _)| name)
            .collect::<std::collections::BTreeSet<String>>()
    })
    .await
    .unwrap_or_default();
    let machines: Vec<_> = (view.machines.iter())
        .filter(|m| matching.contains(&m.name))
        .collect();
    json(&machines)
}

/// `?job=` of `/api/timeline`.
#[derive(serde::Deserialize)]
struct JobQuery {
    job: Option<u64>,
}

/// `/api/timeline` answers a job's timeline with the time it was taken, so
/// that a page draws the spans still open up to then.
#[derive(serde::Serialize)]
struct TimelineAnswer<'a> {
    now: u64,
    #[serde(flatten)]
    timeline: &'a JobTimeline,
}

/// `/api/timeline?job=ID`: the job's hosts over time (held, suspended,
/// lost), for the job view; 404 for a job the dashboard has not seen.
async fn api_timeline(State(shared): State<Shared>, UrlQuery(q): UrlQuery<JobQuery>) -> Response {
    let Some(job) = q.job else {
        return (
            StatusCode::BAD_REQUEST,
            "timeline: say which job, as ?job=ID",
        )
            .into_response();
    };
    let now = fresh(&shared).await.view_time;
    let Ok(timelines) = shared.timelines.lock() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "timeline: poisoned").into_response();
    };
    match timelines.get(carmi_api::ids::JobId(job)) {
        Some(timeline) => json(&TimelineAnswer { now, timeline }),
        None => {
            let why = format!(
                "timeline: job {job} is neither in the queue nor among the last jobs that left it"
            );
            (StatusCode::NOT_FOUND, why).into_response()
        }
    }
}

/// `/metrics`: the pool, the queue and the daemon's counters in
/// Prometheus' text format (`docs/metrics.md`), from a fresh view.
async fn metrics(State(shared): State<Shared>) -> Response {
    let p = fresh(&shared).await;
    let text = scrape::render(&p.view, p.counters, p.view_time, &crate::metrics::METRICS);
    let kind = carmi_api::exposition::CONTENT_TYPE;
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

/// `/api/jobs`: the queue, as `carmi q --json`.
async fn api_jobs(State(shared): State<Shared>) -> Response {
    json(&fresh(&shared).await.view.jobs)
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// How often a stream's token is checked again: a revoked or expired one
/// ends its stream within this.
const STREAM_RECHECK: Duration = Duration::from_secs(2);

/// `/api/events`: the view as a `view` event now and after every change,
/// for as long as the token that opened it may read the pool.
async fn events(
    State(shared): State<Shared>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = shared.views.subscribe();
    shared.wake.notify_one();
    let stop = shared.stop.clone();
    // The guard let it in with this token (never one from the address).
    let still_valid = shared.auth.clone().map(|auth| {
        let token = token_of(&headers, None).unwrap_or_default();
        move || auth(&token).is_ok()
    });
    let state = (rx, stop, None, still_valid);
    let stream = futures_util::stream::unfold(
        state,
        |(mut rx, mut stop, sent, valid)| async move {
            let mut recheck = tokio::time::interval(STREAM_RECHECK);
            recheck.tick().await;
            loop {
                let p = rx.borrow_and_update().clone();
                if !p.json.is_empty() && sent != Some(p.version) {
                    let event = Event::default().event("view").data(p.json.as_str());
                    return Some((Ok(event), (rx, stop, Some(p.version), valid)));
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return None },
                    _ = stop.wait_for(|s| *s) => return None,
                    _ = recheck.tick() => if valid.as_ref().is_some_and(|v| !v()) {
                        tracing::info!("an event stream's token was revoked or expired: the stream ends");
                        return None;
                    },
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Unknown addresses: 404 (writes never get here: the guard said 405).
async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no such page: the dashboard is at /, its API under /api/",
    )
        .into_response()
}

/// Logs where the dashboard is (the daemon prints it on stdout too), and
/// the fingerprint of its certificate.
pub fn announce(url: &str, fingerprint: Option<&str>) {
    match fingerprint {
        Some(sha256) => info!("dashboard at {url} (certificate SHA-256 {sha256})"),
        None => info!("dashboard at {url} in clear HTTP (--http-plain, loopback only)"),
    }
}

#[cfg(test)]
#[path = "dashboard/http_tests.rs"]
mod http_tests;
