//! Who may do what: the powers a token grants and the one table that says
//! which power each action needs. Pure, so that the global RM's driver and
//! its router decide the same way and tests can walk the whole table.
//!
//! The powers, as in HTCondor's authorization levels:
//! - `read`: look at the pool (status, q, history, a job's events and analysis);
//! - `submit`: also submit jobs, and remove, hold, release, fetch the files
//!   and read the logs of *its own* jobs (a job's owner is the identity that
//!   submitted it);
//! - `daemon`: a local RM bound to one machine name: it may register and
//!   advertise that machine only (and read, as every power may);
//! - `admin`: everything, other users' jobs, any machine and tokens included.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// What a token allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Power {
    /// Look at the pool.
    Read,
    /// Look, and submit and manage its own jobs.
    Submit,
    /// Run a local RM for one machine.
    Daemon,
    /// Everything.
    Admin,
}

impl Power {
    /// Every power, weakest first (for help texts and tests).
    pub const ALL: [Power; 4] = [Power::Read, Power::Submit, Power::Daemon, Power::Admin];

    /// Its name, as `--authz` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Power::Read => "read",
            Power::Submit => "submit",
            Power::Daemon => "daemon",
            Power::Admin => "admin",
        }
    }
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Power {
    type Err = String;

    fn from_str(s: &str) -> Result<Power, String> {
        Power::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown power `{s}`: expected read, submit, daemon or admin"))
    }
}

/// The identity a connection proved with its token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Who (a user name, or a machine's daemon identity).
    pub name: String,
    /// What the token allows.
    pub power: Power,
    /// The one machine a `daemon` token may advertise.
    pub machine: Option<String>,
    /// The token's id, so that a revocation finds the connections it opened.
    pub token: String,
}

/// Something a connection asks to do, as far as authorization cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Look at the pool (`what`: status, q, history, ...).
    Read(&'static str),
    /// Submit a job.
    Submit,
    /// Start a new job by hand: an application that connects to a local RM
    /// without a job (needs what [`Action::Submit`] needs).
    StartJob,
    /// Remove, hold, release, fetch files of, or read logs of `job`, owned
    /// by `owner` (`None`: the job is unknown, and the answer will say so).
    Manage {
        /// Which (`rm`, `hold`, ...).
        what: &'static str,
        /// The job.
        job: JobId,
        /// Its owner, if the job is known.
        owner: Option<&'a str>,
    },
    /// Register and advertise machine `machine` (connect as its local RM).
    Advertise {
        /// The machine's name.
        machine: &'a str,
    },
    /// Fetch executables from the global RM's store (a local RM's staging).
    Stage,
    /// Create, list or revoke tokens.
    Tokens(&'static str),
    /// Change how the pool is run (`what`: set a user's priority factor).
    Admin(&'static str),
}

impl fmt::Display for Action<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Read(what) => write!(f, "{what}"),
            Action::Submit => f.write_str("submit"),
            Action::StartJob => f.write_str("start a job"),
            Action::Manage { what, job, .. } => write!(f, "{what} job {job}"),
            Action::Advertise { machine } => write!(f, "advertise machine `{machine}`"),
            Action::Stage => f.write_str("fetch executables"),
            Action::Tokens(what) => write!(f, "{what} tokens"),
            Action::Admin(what) => write!(f, "{what}"),
        }
    }
}

/// Why an action was refused: who, what, and what was missing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{identity}` (power {power}) may not {action}: {missing}")]
pub struct Refusal {
    /// The identity refused.
    pub identity: String,
    /// Its power.
    pub power: Power,
    /// The action, as [`Action`]'s display.
    pub action: String,
    /// What it lacks, in words ("needs power submit", "owned by bob").
    pub missing: String,
}

/// Whether `who` may do `action`, with the reason when not.
pub fn check(who: &Identity, action: &Action) -> Result<(), Refusal> {
    let refuse = |missing: String| Refusal {
        identity: who.name.clone(),
        power: who.power,
        action: action.to_string(),
        missing,
    };
    if who.power == Power::Admin {
        return Ok(());
    }
    match *action {
        Action::Read(_) => Ok(()),
        Action::Submit | Action::StartJob => match who.power {
            Power::Submit => Ok(()),
            _ => Err(refuse("it needs power submit".into())),
        },
        Action::Manage { owner, .. } => match (who.power, owner) {
            (Power::Submit, None) => Ok(()),
            (Power::Submit, Some(o)) if o == who.name => Ok(()),
            (Power::Submit, Some(o)) => Err(refuse(format!(
                "the job is owned by `{o}`; another's job needs power admin"
            ))),
            _ => Err(refuse("it needs power submit (own jobs) or admin".into())),
        },
        Action::Advertise { machine } => match (who.power, who.machine.as_deref()) {
            (Power::Daemon, Some(m)) if m == machine => Ok(()),
            (Power::Daemon, Some(m)) => Err(refuse(format!(
                "its token is bound to machine `{m}`; another machine's name needs power admin"
            ))),
            (Power::Daemon, None) => Err(refuse(
                "its daemon token names no machine; create one with --machine".into(),
            )),
            _ => Err(refuse(
                "it needs power daemon (for this machine) or admin".into(),
            )),
        },
        Action::Stage => match who.power {
            Power::Daemon => Ok(()),
            _ => Err(refuse("it needs power daemon or admin".into())),
        },
        Action::Tokens(_) | Action::Admin(_) => Err(refuse("it needs power admin".into())),
    }
}

/// A token as `carmi token list` shows it (never its signature: the list
/// does not hand out working tokens).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id.
    pub id: String,
    /// Who it names.
    pub identity: String,
    /// What it allows.
    pub power: Power,
    /// A daemon token's machine.
    pub machine: Option<String>,
    /// When it was made, seconds since the Unix epoch.
    pub issued_unix: u64,
    /// When it stops working, seconds since the Unix epoch.
    pub expires_unix: u64,
    /// True once revoked.
    pub revoked: bool,
}

/// Token administration (`carmi token`), admin only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenRequest {
    /// Make and sign a token.
    Create {
        /// Who it names.
        identity: String,
        /// What it allows.
        power: Power,
        /// A daemon token's machine.
        machine: Option<String>,
        /// How long it lasts, in seconds.
        lifetime_s: u64,
    },
    /// The tokens the global RM made (and the revoked ones).
    List,
    /// Revoke token `id`: refused from now on, its open connections closed.
    Revoke {
        /// The token's id.
        id: String,
    },
    /// A local RM asks whether a token shown to it is good: `shown` is the
    /// token's public part and its holder's proof, made for this machine
    /// (`carmi_api::proof::Presented::encode`). Only the machine's own
    /// daemon may ask, and each proof is taken once.
    Vouch {
        /// The proof, as its holder made it.
        shown: String,
    },
}

/// Answer to a [`TokenRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenAnswer {
    /// The new token: its text (to hand to its holder) and what it says.
    Created {
        /// The token, one line.
        token: String,
        /// Its claims.
        info: TokenInfo,
    },
    /// Every token made by this global RM.
    List(Vec<TokenInfo>),
    /// The answer to [`TokenRequest::Vouch`]: the proof is good, and its
    /// token names this identity.
    Vouched {
        /// Who.
        identity: String,
        /// With what power.
        power: Power,
        /// A daemon token's machine.
        machine: Option<String>,
    },
    /// Revoked (`known`: false if the global RM never made it; it is refused all the same).
    Revoked {
        /// The id.
        id: String,
        /// Whether this global RM made it.
        known: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str, power: Power, machine: Option<&str>) -> Identity {
        Identity {
            name: name.into(),
            power,
            machine: machine.map(Into::into),
            token: "t".into(),
        }
    }

    #[test]
    fn the_table() {
        let job = JobId(1);
        let own = Action::Manage {
            what: "rm",
            job,
            owner: Some("alice"),
        };
        let other = Action::Manage {
            what: "rm",
            job,
            owner: Some("bob"),
        };
        let m1 = Action::Advertise { machine: "m1" };
        let m2 = Action::Advertise { machine: "m2" };
        let create = Action::Tokens("create");
        // (power, read, submit, rm own, rm other's, advertise m1, advertise m2, tokens)
        let table = [
            (
                Power::Read,
                [true, false, false, false, false, false, false],
            ),
            (
                Power::Submit,
                [true, true, true, false, false, false, false],
            ),
            (
                Power::Daemon,
                [true, false, false, false, true, false, false],
            ),
            (Power::Admin, [true, true, true, true, true, true, true]),
        ];
        for (power, want) in table {
            let id = who("alice", power, Some("m1"));
            let actions = [
                Action::Read("status"),
                Action::Submit,
                own,
                other,
                m1,
                m2,
                create,
            ];
            for (action, allowed) in actions.iter().zip(want) {
                let got = check(&id, action);
                assert_eq!(got.is_ok(), allowed, "{power} {action}: {got:?}");
            }
        }
    }

    #[test]
    fn a_refusal_names_identity_action_and_what_is_missing() {
        let e = check(&who("carol", Power::Read, None), &Action::Submit).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`carol` (power read) may not submit: it needs power submit"
        );
        let e = check(
            &who("m1", Power::Daemon, Some("m1")),
            &Action::Advertise { machine: "m2" },
        )
        .unwrap_err();
        assert!(e.to_string().contains("bound to machine `m1`"), "{e}");
        let e = check(
            &who("alice", Power::Submit, None),
            &Action::Manage {
                what: "hold",
                job: JobId(7),
                owner: Some("bob"),
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("may not hold job j7"), "{e}");
        assert!(e.to_string().contains("owned by `bob`"), "{e}");
    }

    #[test]
    fn powers_parse_by_name() {
        for p in Power::ALL {
            assert_eq!(p.name().parse::<Power>(), Ok(p));
        }
        assert!("root".parse::<Power>().is_err());
    }
}
