//! When the global RM renews the daemon token a local RM's link stands on,
//! and which tokens it replaced may be revoked once the local RM has the new
//! one. Pure: a token's times and `now` (seconds since the Unix epoch) in, a
//! decision out; the connection's task (`carmi_global::server`) signs, sends
//! and revokes.
//!
//! A daemon token is renewed once a third of its lifetime or less is left
//! (`lifetime = expires - issued`, the third rounded up to whole seconds, so
//! that even a token of a few seconds is renewed before it expires): a
//! machine's token of 30 days is replaced after 20, leaving 10 days for a
//! link that is down to come back and be renewed. Only daemon tokens are
//! renewed: the link is a local RM's, and an admin token that opened one is
//! its admin's to manage.

use std::collections::VecDeque;

use carmi_proto::authz::Power;

/// What the decision needs of the token a link presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenLife {
    /// Its power (only `daemon` tokens are renewed).
    pub power: Power,
    /// When it was made, seconds since the Unix epoch.
    pub issued_unix: u64,
    /// When it stops working, seconds since the Unix epoch.
    pub expires_unix: u64,
}

impl TokenLife {
    /// Its lifetime in seconds, which the new token is given too.
    pub fn lifetime_s(&self) -> u64 {
        self.expires_unix.saturating_sub(self.issued_unix)
    }

    /// When it is due for renewal: a third of its lifetime (rounded up)
    /// before its expiry.
    pub fn renew_at(&self) -> u64 {
        (self.expires_unix).saturating_sub(self.lifetime_s().div_ceil(3))
    }
}

/// What the link's task does about its token at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make a new token and send it on the link now.
    Renew,
    /// Nothing before this time (seconds since the Unix epoch); `None`:
    /// nothing ever (a token that is not renewed waits for its expiry,
    /// which the link's watch on revocation and expiry ends it at).
    Wait(Option<u64>),
    /// The token has expired: the link ends.
    Expired,
}

/// How long after a renewal that failed (the token book could not be saved,
/// the link's queue was full) the next attempt is made: a tenth of the
/// token's lifetime, between 1 s and 10 minutes.
pub fn retry_after_s(life: &TokenLife) -> u64 {
    (life.lifetime_s() / 10).clamp(1, 600)
}

/// The step for a link whose token is `life` at `now`; `failed_at`: when the
/// last renewal of this token failed, if it did.
pub fn decide(life: &TokenLife, now: u64, failed_at: Option<u64>) -> Step {
    if now >= life.expires_unix {
        return Step::Expired;
    }
    if life.power != Power::Daemon {
        return Step::Wait(None);
    }
    let due = match failed_at {
        Some(t) => life.renew_at().max(t.saturating_add(retry_after_s(life))),
        None => life.renew_at(),
    };
    if now >= due {
        Step::Renew
    } else {
        Step::Wait(Some(due))
    }
}

/// The renewals sent on one link and not yet answered, and the tokens they
/// replaced that are still live.
///
/// A local RM answers every renewal, in order, saying whether the new token
/// reached its token file. Once one has (`saved`), every token it replaced
/// may be revoked: the file and the local RM's memory hold the new one. A
/// token whose successor lives in memory only (a file it could not write)
/// stays live until then, or until it expires: it is what the local RM reads
/// at its next start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Renewals {
    /// For each renewal sent and not answered, oldest first: the id of the
    /// token it replaced.
    awaiting: VecDeque<String>,
    /// Replaced tokens whose successors were taken but not saved.
    replaced: Vec<String>,
}

impl Renewals {
    /// A renewal replacing the token `old_id` was sent.
    pub fn sent(&mut self, old_id: String) {
        self.awaiting.push_back(old_id);
    }

    /// The local RM answered the oldest renewal sent: the ids to revoke now
    /// (empty unless `saved`), or why the answer makes no sense (none was
    /// awaited: a local RM answering a renewal never sent).
    pub fn taken(&mut self, saved: bool) -> Result<Vec<String>, String> {
        let old = (self.awaiting.pop_front())
            .ok_or_else(|| "TokenTaken answers no renewal sent on this link".to_string())?;
        self.replaced.push(old);
        Ok(if saved {
            std::mem::take(&mut self.replaced)
        } else {
            Vec::new()
        })
    }

    /// How many renewals await an answer.
    pub fn awaiting(&self) -> usize {
        self.awaiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon(issued_unix: u64, lifetime: u64) -> TokenLife {
        TokenLife {
            power: Power::Daemon,
            issued_unix,
            expires_unix: issued_unix + lifetime,
        }
    }

    #[test]
    fn a_daemon_token_is_renewed_once_a_third_of_its_lifetime_is_left() {
        let thirty_days = 30 * 24 * 3600;
        let t = daemon(1_000, thirty_days);
        let twenty_days = 1_000 + 20 * 24 * 3600;
        assert_eq!(decide(&t, 1_000, None), Step::Wait(Some(twenty_days)));
        assert_eq!(
            decide(&t, twenty_days - 1, None),
            Step::Wait(Some(twenty_days))
        );
        assert_eq!(decide(&t, twenty_days, None), Step::Renew);
        assert_eq!(decide(&t, 1_000 + thirty_days - 1, None), Step::Renew);
        assert_eq!(decide(&t, 1_000 + thirty_days, None), Step::Expired);
    }

    #[test]
    fn short_lifetimes_are_renewed_before_they_expire() {
        // 6 s: renewed with 2 s left.
        assert_eq!(decide(&daemon(100, 6), 103, None), Step::Wait(Some(104)));
        assert_eq!(decide(&daemon(100, 6), 104, None), Step::Renew);
        // 1 s and 2 s: at once (a third rounds up to a whole second).
        assert_eq!(decide(&daemon(100, 1), 100, None), Step::Renew);
        assert_eq!(decide(&daemon(100, 2), 100, None), Step::Wait(Some(101)));
        assert_eq!(decide(&daemon(100, 2), 101, None), Step::Renew);
        assert_eq!(decide(&daemon(100, 2), 102, None), Step::Expired);
    }

    #[test]
    fn only_daemon_tokens_are_renewed() {
        for power in [Power::Read, Power::Submit, Power::Admin] {
            let t = TokenLife {
                power,
                ..daemon(100, 6)
            };
            assert_eq!(decide(&t, 105, None), Step::Wait(None), "{power}");
            assert_eq!(decide(&t, 106, None), Step::Expired, "{power}");
        }
    }

    #[test]
    fn a_failed_renewal_is_tried_again_after_a_tenth_of_the_lifetime() {
        let t = daemon(0, 3000);
        assert_eq!(decide(&t, 2000, None), Step::Renew);
        assert_eq!(decide(&t, 2000, Some(2000)), Step::Wait(Some(2300)));
        assert_eq!(decide(&t, 2300, Some(2000)), Step::Renew);
        // Never sooner than a second, never later than ten minutes.
        assert_eq!(retry_after_s(&daemon(0, 6)), 1);
        assert_eq!(retry_after_s(&daemon(0, 30 * 24 * 3600)), 600);
    }

    #[test]
    fn replaced_tokens_are_revoked_once_a_successor_is_saved() {
        let mut r = Renewals::default();
        assert!(r.taken(true).is_err(), "an answer to no renewal");
        r.sent("t0".into());
        r.sent("t1".into());
        assert_eq!(r.awaiting(), 2);
        // t1 lives in memory only: t0, still in the file, stays live.
        assert_eq!(r.taken(false).unwrap(), Vec::<String>::new());
        // t2 is in the file: t0 and t1 go.
        assert_eq!(r.taken(true).unwrap(), vec!["t0", "t1"]);
        assert_eq!(r.awaiting(), 0);
        r.sent("t2".into());
        assert_eq!(r.taken(true).unwrap(), vec!["t2"]);
    }
}
