//! The global RM's token authority: the pool's signing key, the tokens it
//! made and the ones revoked (kept in `tokens.json` in the state directory),
//! the check of every connection's token in its handshake, and the watch
//! that ends a connection whose token is revoked or expires.
//!
//! The signing key never leaves this daemon: `carmi token create` asks it
//! for a token over an admin connection, and it signs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use carmi_api::authz::{Action, Identity, TokenAnswer, TokenInfo, TokenRequest, check};
use carmi_api::msg::{Failure, FailureCode, FromGlobal, Role};
use carmi_api::proof::{GLOBAL, Presented, SeenProofs};
use carmi_api::token::{Claims, Grant, PublicKey, SigningKey, now_unix};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{info, warn};

/// Longest lifetime a token may be given: ten years.
pub const MAX_LIFETIME_S: u64 = 10 * 365 * 24 * 3600;

/// How long after its expiry a token's entry is kept in the book: a token
/// past its expiry is refused as expired, so its revocation is no longer
/// needed; the margin covers a clock set back (by NTP, by hand) meanwhile.
pub const EXPIRED_KEPT_S: u64 = 24 * 3600;

/// What the authority remembers, on disk as JSON.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    issued: Vec<TokenInfo>,
    revoked: HashSet<String>,
}

impl Book {
    /// Drops the tokens expired more than [`EXPIRED_KEPT_S`] before `now`
    /// (seconds since the Unix epoch) and their revocations, so that the
    /// revocation list shrinks instead of growing for ever; returns how many
    /// entries went. A revoked id the book did not issue (a token made
    /// elsewhere with the key) has no known expiry and stays.
    fn compact(&mut self, now: u64) -> usize {
        let before = self.issued.len() + self.revoked.len();
        let gone: HashSet<String> = (self.issued.iter())
            .filter(|t| t.expires_unix.saturating_add(EXPIRED_KEPT_S) < now)
            .map(|t| t.id.clone())
            .collect();
        self.issued.retain(|t| !gone.contains(&t.id));
        self.revoked.retain(|id| !gone.contains(id));
        before - self.issued.len() - self.revoked.len()
    }
}

/// A connection's proved identity and when its token stops working.
#[derive(Clone, Debug)]
pub struct Admitted {
    /// Who, with what power.
    pub identity: Identity,
    /// When its token was made, seconds since the Unix epoch.
    pub issued_unix: u64,
    /// Its token's expiry, seconds since the Unix epoch.
    pub expires_unix: u64,
}

impl Admitted {
    /// What a renewal decision needs of its token.
    pub fn life(&self) -> carmi_global_core::renewal::TokenLife {
        carmi_global_core::renewal::TokenLife {
            power: self.identity.power,
            issued_unix: self.issued_unix,
            expires_unix: self.expires_unix,
        }
    }
}

/// Default for [`Authority::set_connection_cap`]: an eighth of the
/// daemon's default connections. A machine's local RM holds two (its link
/// and a staging connection), a user's tools a few.
pub const MAX_CONNECTIONS_PER_IDENTITY: usize = 1024;

/// A connection admitted by [`Authority::admit_connection`]: its identity,
/// and its place in the identity's count, given back when it is dropped.
#[derive(Debug)]
pub struct Connected {
    /// What the token proved.
    pub admitted: Admitted,
    /// Its place in the identity's count: hold it as long as the connection.
    pub place: carmi_api::capped::Place<String>,
}

/// The pool's token authority (see the module documentation).
pub struct Authority {
    key: std::sync::Arc<SigningKey>,
    /// The forwarded proofs taken (each is taken once).
    seen: Mutex<SeenProofs>,
    public: PublicKey,
    book_path: PathBuf,
    book: Mutex<Book>,
    revocations: watch::Sender<u64>,
    /// Revoked ids that renewals replaced (`Authority::retire`): refused
    /// to new connections, but a staging transfer already under way on one
    /// finishes (until its expiry). In memory: no connection outlives a restart.
    retired: Mutex<HashSet<String>>,
    /// Connections open per identity (by name).
    per_identity: carmi_api::capped::PerHolder<String>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authority(pool {})", self.public.pool_id())
    }
}

impl Authority {
    /// Reads the signing key `key_file` (refused if others may read it) and
    /// the book of tokens in `state_dir`.
    pub fn open(key_file: &Path, state_dir: &Path) -> Result<Authority, String> {
        let text = carmi_api::files::read_private(key_file).map_err(|e| e.to_string())?;
        let key =
            SigningKey::from_text(&text).map_err(|e| format!("{}: {e}", key_file.display()))?;
        let book_path = state_dir.join("tokens.json");
        let book = match std::fs::read(&book_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a token book: {e}", book_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(format!("{}: {e}", book_path.display())),
        };
        let authority = Authority::new(key, book_path, book);
        {
            let mut book = authority.book();
            if book.compact(now_unix()) > 0
                && let Err(e) = authority.save(&book)
            {
                warn!("{e}; the expired entries are dropped again at the next start");
            }
        }
        Ok(authority)
    }

    /// An authority over `key` keeping its book at `state_dir` (for pools
    /// made in-process, whose key never touches a file).
    pub fn with_key(key: SigningKey, state_dir: &Path) -> Authority {
        Authority::new(key, state_dir.join("tokens.json"), Book::default())
    }

    fn new(key: SigningKey, book_path: PathBuf, book: Book) -> Authority {
        let public = key.public();
        Authority {
            key: std::sync::Arc::new(key),
            seen: Mutex::default(),
            public,
            book_path,
            book: Mutex::new(book),
            revocations: watch::channel(0).0,
            retired: Mutex::default(),
            per_identity: carmi_api::capped::PerHolder::new(
                MAX_CONNECTIONS_PER_IDENTITY,
                "max_connections_per_identity",
            ),
        }
    }

    /// Caps the connections one identity (a user, a machine's daemon) may
    /// hold open at once at `max`: one token cannot take every connection
    /// of the daemon and lock the pool's other users and machines out.
    pub fn set_connection_cap(&mut self, max: usize) {
        self.per_identity = carmi_api::capped::PerHolder::new(max, "max_connections_per_identity");
    }

    /// [`Authority::admit`] for a connection, which also takes a place in
    /// its identity's count of open connections, or is refused past the cap.
    pub fn admit_connection(
        &self,
        role: &Role,
        shown: Option<&Presented>,
    ) -> Result<Connected, String> {
        let admitted = self.admit(role, shown)?;
        let name = admitted.identity.name.clone();
        let place = (self.per_identity)
            .take(name.clone(), &format!("identity `{name}`"))
            .map_err(|e| format!("too many connections: {e}"))?;
        Ok(Connected { admitted, place })
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panic while holding it cannot leave the book half changed (each
        // change is one insert or push), so a poisoned lock is still good.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool's signing key, with which this global RM proves itself in
    /// every handshake it serves ([`carmi_api::handshake::Secret::with_signer`]).
    pub fn signer(&self) -> std::sync::Arc<SigningKey> {
        self.key.clone()
    }

    /// Checks the token a connection showed (its holder's proof, made for
    /// this global RM) against its declared role: the identity it may act
    /// as, or the reason to refuse it (sent to the client).
    pub fn admit(&self, role: &Role, shown: Option<&Presented>) -> Result<Admitted, String> {
        let Some(shown) = shown else {
            return Err(
                "no token: this pool admits only connections that present one \
                 (ask its admin for one: `carmi token create`; give it with CARMI_TOKEN or --token)"
                    .into(),
            );
        };
        let claims: Claims = {
            let book = self.book();
            shown
                .check(&self.key, GLOBAL, now_unix(), &book.revoked)
                .map_err(|e| format!("token refused: {e}"))?
        };
        self.admitted(role, claims)
    }

    /// Checks a token's proof that the local RM of `machine` forwards (an
    /// application starting a job there, a control connection): made for
    /// that machine, fresh, and not taken before.
    pub fn admit_forwarded(&self, shown: &str, machine: &str) -> Result<Admitted, String> {
        let shown = Presented::decode(shown)?;
        let audience = carmi_api::proof::local(machine);
        let now = now_unix();
        let claims: Claims = {
            let book = self.book();
            shown
                .check(&self.key, &audience, now, &book.revoked)
                .map_err(|e| format!("token refused: {e}"))?
        };
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // Only once everything else holds: a bad proof takes no place.
        { seen }
            .take(&claims.id, &shown.context, now)
            .map_err(|e| format!("token refused: {e}"))?;
        self.admitted(&shown.context.role, claims)
    }

    fn admitted(&self, role: &Role, claims: Claims) -> Result<Admitted, String> {
        let identity = claims.identity();
        // A staging connection is a local RM's: it presents the same daemon
        // token as its link (only towards the global RM; to peers, none).
        if let Role::Local { name } | Role::Stager { name } = role {
            check(&identity, &Action::Advertise { machine: name })
                .map_err(|r| format!("permission denied: {r}"))?;
        }
        // A relay stands for the global RM towards its machines and vouches
        // for what they send: the admin's to run, as the global RM is.
        if let Role::Relay { name } = role
            && identity.power != carmi_api::authz::Power::Admin
        {
            return Err(format!(
                "permission denied: relay `{name}` needs a token with power admin, and `{}`'s has power {}",
                identity.name,
                identity.power.name()
            ));
        }
        Ok(Admitted {
            identity,
            issued_unix: claims.issued_unix,
            expires_unix: claims.expires_unix,
        })
    }

    /// Whether `token` (the whole token, holder key included: a browser
    /// shows it to the dashboard, which is this daemon) may read the pool,
    /// or why not: the web dashboard's check of each request.
    pub fn check_read(&self, token: &str) -> Result<(), String> {
        let claims = {
            let book = self.book();
            self.public
                .verify(token, now_unix(), &book.revoked)
                .map_err(|e| format!("token refused: {e}"))?
        };
        if !carmi_api::proof::holds(&self.key, token, &claims) {
            return Err(format!(
                "token refused: the token of `{}` was given without its holder key \
                 (give the dashboard the whole line of the token file)",
                claims.identity
            ));
        }
        let admitted = self.admitted(&Role::Admin, claims)?;
        check(&admitted.identity, &Action::Read("dashboard"))
            .map_err(|r| format!("permission denied: {r}"))
    }

    /// Resolves once `admitted`'s token is revoked or expires, with why: the
    /// connection that holds it is then closed. With `spare_retired` (a
    /// staging connection), a token revoked because a renewal replaced it
    /// (not by an admin) does not close it: a copy under way finishes.
    pub async fn until_invalid(&self, admitted: &Admitted, spare_retired: bool) -> String {
        let mut changes = self.revocations.subscribe();
        let id = &admitted.identity.token;
        loop {
            let spared = || spare_retired && self.retired().contains(id);
            if self.book().revoked.contains(id) && !spared() {
                return format!("token {id} of `{}` was revoked", admitted.identity.name);
            }
            let now = now_unix();
            if now >= admitted.expires_unix {
                return format!("token {id} of `{}` expired", admitted.identity.name);
            }
            // Whole seconds: a token expires at the start of its second.
            let left = Duration::from_secs((admitted.expires_unix - now).min(3600));
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                changed = changes.changed() => if changed.is_err() {
                    std::future::pending::<()>().await;
                },
            }
        }
    }

    /// Carries out a `carmi token` request of `who` (`None`: a connection
    /// without identity, which a pool with an authority never has).
    pub fn handle(&self, who: Option<&Identity>, req: TokenRequest) -> FromGlobal {
        let what = match &req {
            TokenRequest::Create { .. } => "create",
            TokenRequest::List => "list",
            TokenRequest::Revoke { .. } => "revoke",
            TokenRequest::Vouch { .. } => "vouch",
        };
        let fail = |code, message: String| FromGlobal::AdminFailed(Failure { code, message });
        let Some(who) = who else {
            return fail(FailureCode::Denied, "permission denied: no identity".into());
        };
        // A vouch is a machine's question, with rules of its own (`vouch`).
        if !matches!(req, TokenRequest::Vouch { .. })
            && let Err(r) = check(who, &Action::Tokens(what))
        {
            warn!(identity = who.name, power = %who.power, "refused: {r}");
            return fail(FailureCode::Denied, format!("permission denied: {r}"));
        }
        match req {
            TokenRequest::Vouch { shown } => self.vouch(who, &shown),
            TokenRequest::Create {
                identity,
                power,
                machine,
                lifetime_s,
            } => {
                if lifetime_s > MAX_LIFETIME_S {
                    let m = format!(
                        "a lifetime of {lifetime_s} s exceeds the limit of {MAX_LIFETIME_S} s (ten years)"
                    );
                    return fail(FailureCode::Invalid, m);
                }
                let grant = Grant {
                    identity,
                    power,
                    machine,
                    lifetime_s,
                };
                match self.key.issue(&grant, now_unix()) {
                    Ok((token, claims)) => {
                        let info = info_of(&claims);
                        info!(by = who.name, id = claims.id, identity = claims.identity, power = %claims.power, "token created");
                        let saved = {
                            let mut book = self.book();
                            book.issued.push(info.clone());
                            book.compact(now_unix());
                            self.save(&book)
                        };
                        match saved {
                            Ok(()) => FromGlobal::Tokens(TokenAnswer::Created { token, info }),
                            Err(e) => fail(FailureCode::Unavailable, e),
                        }
                    }
                    Err(e) => fail(FailureCode::Invalid, e.to_string()),
                }
            }
            TokenRequest::List => {
                let book = self.book();
                let list = (book.issued.iter().cloned())
                    .map(|mut t| {
                        t.revoked = book.revoked.contains(&t.id);
                        t
                    })
                    .collect();
                FromGlobal::Tokens(TokenAnswer::List(list))
            }
            TokenRequest::Revoke { id } => {
                // An admin's revocation closes staging connections too.
                self.retired().remove(&id);
                let saved = {
                    let mut book = self.book();
                    book.revoked.insert(id.clone());
                    book.compact(now_unix());
                    self.save(&book)
                };
                // In force at once, saved or not: the connections go now.
                self.revocations.send_modify(|n| *n += 1);
                info!(by = who.name, id, "token revoked");
                let known = self.book().issued.iter().any(|t| t.id == id);
                match saved {
                    Ok(()) => FromGlobal::Tokens(TokenAnswer::Revoked { id, known }),
                    Err(e) => fail(
                        FailureCode::Unavailable,
                        format!("revoked until this global RM restarts, but {e}"),
                    ),
                }
            }
        }
    }

    /// A local RM's question about a token shown to it: only that machine's
    /// own daemon asks, for proofs made for its name.
    fn vouch(&self, who: &Identity, shown: &str) -> FromGlobal {
        let machine = match (&who.power, &who.machine) {
            (carmi_api::token::Power::Daemon, Some(m)) => m,
            _ => {
                let m = format!(
                    "permission denied: `{}` (power {}) is no machine's daemon: only a local RM asks whether a token shown to it is good",
                    who.name, who.power
                );
                return FromGlobal::AdminFailed(Failure {
                    code: FailureCode::Denied,
                    message: m,
                });
            }
        };
        match self.admit_forwarded(shown, machine) {
            Ok(a) => FromGlobal::Tokens(TokenAnswer::Vouched {
                identity: a.identity.name,
                power: a.identity.power,
                machine: a.identity.machine,
            }),
            Err(message) => {
                warn!(
                    machine,
                    "a token shown to this machine was refused: {message}"
                );
                FromGlobal::AdminFailed(Failure {
                    code: FailureCode::Denied,
                    message,
                })
            }
        }
    }

    /// The certificate of `machine`'s `key` (its local RM's, asked over its
    /// link), signed with the pool's key ([`carmi_api::machinecert`]).
    pub fn certify(&self, machine: &str, key: &str) -> Result<String, String> {
        let key = PublicKey::from_text(key).map_err(|e| e.to_string())?;
        Ok(carmi_api::machinecert::issue(
            &self.key,
            machine,
            &key,
            now_unix(),
        ))
    }

    /// The certificate of relay `name`'s `key` (a relay's, which its
    /// machines take in place of the pool key's own signature).
    pub fn certify_relay(&self, name: &str, key: &str) -> Result<String, String> {
        let key = PublicKey::from_text(key).map_err(|e| e.to_string())?;
        Ok(carmi_api::machinecert::issue_relay(
            &self.key,
            name,
            &key,
            now_unix(),
        ))
    }

    /// A new token for the identity, power and machine of `admitted`, with
    /// its lifetime (at most [`MAX_LIFETIME_S`]) from `now_unix` and a new id,
    /// recorded in the book like one `carmi token create` made: a link's
    /// daemon token renewed (`server::renew`). Refused for a token that is
    /// revoked, or when the book cannot be saved (the new token would be
    /// forgotten at the next start).
    pub fn renew(&self, admitted: &Admitted, now_unix: u64) -> Result<(String, Admitted), String> {
        let old = &admitted.identity;
        let grant = Grant {
            identity: old.name.clone(),
            power: old.power,
            machine: old.machine.clone(),
            lifetime_s: admitted.life().lifetime_s().min(MAX_LIFETIME_S),
        };
        let (token, claims) = (self.key.issue(&grant, now_unix)).map_err(|e| e.to_string())?;
        {
            let mut book = self.book();
            if book.revoked.contains(&old.token) {
                return Err(format!("token {} was revoked", old.token));
            }
            book.issued.push(info_of(&claims));
            book.compact(now_unix);
            self.save(&book)?;
        }
        info!(
            identity = claims.identity,
            old = old.token,
            new = claims.id,
            expires_unix = claims.expires_unix,
            "daemon token renewed"
        );
        let renewed = Admitted {
            identity: claims.identity(),
            issued_unix: claims.issued_unix,
            expires_unix: claims.expires_unix,
        };
        Ok((token, renewed))
    }

    /// Revokes the tokens `ids`, which renewals replaced and whose holder
    /// has saved their successor: only the newest stays live. Refused to new
    /// connections at once, while a staging copy under way on one finishes
    /// (`until_invalid`); a book that cannot be saved is logged, and they
    /// are revoked until a restart.
    pub fn retire(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let saved = {
            let mut book = self.book();
            book.revoked.extend(ids.iter().cloned());
            let mut retired = self.retired();
            retired.extend(ids.iter().cloned());
            // Those the book has forgotten (expired a day ago) go too.
            retired.retain(|id| book.revoked.contains(id));
            self.save(&book)
        };
        self.revocations.send_modify(|n| *n += 1);
        info!(?ids, "tokens replaced by their renewal revoked");
        if let Err(e) = saved {
            warn!(
                ?ids,
                "replaced tokens revoked until this global RM restarts, but {e}"
            );
        }
    }

    fn retired(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Saves `book`.
    fn save(&self, book: &Book) -> Result<(), String> {
        let json = serde_json::to_string_pretty(book).expect("the book serializes");
        carmi_api::files::write_private(&self.book_path, &json, true)
            .map_err(|e| format!("cannot save the token book: {e}"))
    }
}

fn info_of(c: &Claims) -> TokenInfo {
    TokenInfo {
        id: c.id.clone(),
        identity: c.identity.clone(),
        power: c.power,
        machine: c.machine.clone(),
        issued_unix: c.issued_unix,
        expires_unix: c.expires_unix,
        revoked: false,
    }
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
