//! The router's side of fair share between users (issue 15, item 7; the
//! policy is `alloc::share`, the accounting `crate::usage`): each user's
//! standing for `carmi q`, and their usage in the journal, so that a
//! restart of the global RM does not hand a heavy user a clean slate. A
//! job's user is its accounting group (`AccountingGroup`, `group.user`)
//! when it names one, else its owner (issue 32), as HTCondor charges it.

use std::time::Duration;

use carmi_proto::ids::JobId;
use carmi_proto::msg::{FailureCode, FromGlobal, UserPrio, UserPrioRequest, UserShare};
use tracing::info;

use super::{LinkId, Output, Router};
use crate::journal::Record;

/// Usage is journaled at most this often (and only while someone has some).
const JOURNAL_EVERY: Duration = Duration::from_secs(60);

impl Router {
    /// The standing in the fair share between users of the user `job` is
    /// charged to (its accounting group, else its owner), for `carmi q`.
    pub(super) fn user_share(&self, job: JobId) -> UserShare {
        let user = self.alloc.job_user(job);
        let u = self.alloc.user_usage(user);
        UserShare {
            priority: u.priority(),
            usage_hours: u.host_seconds / 3600.0,
            factor: u.factor,
            name: (user != self.alloc.job_owner(job)).then(|| user.to_string()),
        }
    }

    /// `carmi userprio`: lists the users, or (the link's power checked
    /// already) sets one's priority factor, journaled, and lists them.
    pub(super) fn user_prio(&mut self, link: LinkId, req: UserPrioRequest) {
        if let UserPrioRequest::SetFactor { user, factor } = req {
            if user.is_empty() || user.len() > 256 {
                let why = "the user name must be 1 to 256 bytes".to_string();
                return self.admin_fail(link, FailureCode::Invalid, why);
            }
            if !(factor.is_finite() && factor > 0.0 && factor <= 1e9) {
                let why = format!(
                    "priority factor {factor} for user `{user}`: it must be a positive number (at most 1e9; 1 is the default)"
                );
                return self.admin_fail(link, FailureCode::Invalid, why);
            }
            info!(user, factor, "priority factor set");
            self.alloc.set_user_factor(&user, factor);
            let users = self
                .alloc
                .usage()
                .users()
                .filter(|(_, u)| u.factor != 1.0)
                .map(|(name, u)| (name.to_string(), u.factor))
                .collect();
            self.out.push(Output::Journal(Record::Factors { users }));
        }
        let mut users: Vec<UserPrio> = self
            .alloc
            .usage()
            .users()
            .map(|(name, u)| UserPrio {
                user: name.to_string(),
                priority: u.priority(),
                usage_hours: u.host_seconds / 3600.0,
                factor: u.factor,
            })
            .collect();
        users.sort_by(|a, b| a.priority.total_cmp(&b.priority).then(a.user.cmp(&b.user)));
        self.send(link, FromGlobal::Users(users));
    }

    /// Writes every user's usage to the journal once per [`JOURNAL_EVERY`].
    pub(super) fn journal_usage(&mut self) {
        if self.now < self.usage_journaled + JOURNAL_EVERY {
            return;
        }
        let users: Vec<(String, f64)> = self
            .alloc
            .usage()
            .users()
            .map(|(name, u)| (name.to_string(), u.host_seconds))
            .collect();
        if users.is_empty() {
            return;
        }
        self.usage_journaled = self.now;
        let at_unix = self.config.started_unix + self.now.as_secs();
        self.out
            .push(Output::Journal(Record::Usage { at_unix, users }));
    }

    /// Puts back the usage of a replayed `Usage` record, decayed over the
    /// time from `at_unix` to this run's start (the global RM was down, and
    /// nobody used the pool through it).
    pub(super) fn recover_usage(&mut self, at_unix: u64, users: Vec<(String, f64)>) {
        let gap = self.config.started_unix.saturating_sub(at_unix) as f64;
        let half_life = self.alloc.usage().half_life().as_secs_f64();
        let keep = 0.5f64.powf(gap / half_life);
        for (user, host_seconds) in users {
            self.alloc.restore_usage(&user, host_seconds * keep);
        }
    }
}
