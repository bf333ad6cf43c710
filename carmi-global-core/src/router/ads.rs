//! Machine ads and heartbeat updates checked against their limits and parsed
//! before the router sees them. The driver does this on the connection's own
//! task (a large one on the blocking pool), so that one huge ad costs its
//! sender's connection time, never the single router task that every other
//! machine's heartbeats wait for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use carmi_proto::msg::ToGlobal;
use classad::ClassAd;

use super::RouterConfig;

/// Default for [`RouterConfig::max_ad_attributes`]. HTCondor's machine ads
/// have a few hundred attributes; sixteen times that leaves room for custom
/// ones while an ad stays cheap to parse, store and match.
pub const MAX_AD_ATTRIBUTES: usize = 4096;

/// Default for [`RouterConfig::max_ad_bytes`]: a machine ad or update of
/// more than 1 MiB of text is a mistake or an attack (real ones are a few KiB).
pub const MAX_AD_BYTES: usize = 1 << 20;

/// Default for [`RouterConfig::max_new_names_per_connection`]: as many new
/// names as one ad may hold. A machine's vocabulary is mostly the pool's
/// (known after the first machine), so an honest one brings its few custom
/// names once; one that invents names in every heartbeat is refused after
/// this many, while the names it brought stay in the process's table (which
/// `--max-attribute-names` caps for every sender together).
pub const MAX_NEW_NAMES_PER_CONNECTION: usize = MAX_AD_ATTRIBUTES;

/// How many names new to the process one connection's ads may still bring:
/// shared with the blocking-pool tasks that parse its large ads.
#[derive(Clone, Debug)]
pub struct NameAllowance(Arc<AtomicUsize>);

impl NameAllowance {
    /// An allowance of `names` new names.
    pub fn new(names: usize) -> NameAllowance {
        NameAllowance(Arc::new(AtomicUsize::new(names)))
    }

    /// Runs `parse` within what is left, and charges what it added.
    fn spend<T>(&self, parse: impl FnOnce() -> T) -> T {
        let (out, used) = classad::symbol::with_name_budget(self.0.load(Ordering::Relaxed), parse);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_sub(used))
            });
        out
    }
}

/// An ad text over this size is decoded on the blocking pool rather than on
/// the connection's task, which shares the runtime's few worker threads.
const HEAVY_AD_BYTES: usize = 64 * 1024;

/// A message from a connection, with the ClassAd it carries (the machine ad
/// of `Advertise`, the update of `Heartbeat`) already checked and parsed: its
/// text is dropped from the message once parsed.
pub struct Decoded {
    pub(super) msg: ToGlobal,
    /// `None`: the message carries no ad (or an empty update). `Err`: the ad
    /// broke a limit or does not parse, with the reason for its sender.
    pub(super) ad: Option<Result<ClassAd, String>>,
}

impl Decoded {
    /// The name of its message's variant, for logs.
    pub fn name(&self) -> &'static str {
        super::variant_name(&self.msg)
    }

    /// Checks and parses the ad that `msg` carries, if any, with no
    /// allowance of its own (the process's cap on names still holds).
    pub fn new(msg: ToGlobal, config: &RouterConfig) -> Decoded {
        Decoded::within(msg, config, &NameAllowance::new(usize::MAX))
    }

    /// Like [`Decoded::new`] for a message of the connection whose
    /// allowance of new names is `names`.
    pub fn within(mut msg: ToGlobal, config: &RouterConfig, names: &NameAllowance) -> Decoded {
        let ad = match &mut msg {
            ToGlobal::Advertise { ad, .. } => Some(check(
                &std::mem::take(ad),
                "machine ad",
                (config, names),
                ClassAd::parse_any,
            )),
            ToGlobal::Heartbeat { update } if !update.trim().is_empty() => Some(check(
                &std::mem::take(update),
                "heartbeat update",
                (config, names),
                ClassAd::parse_old,
            )),
            _ => None,
        };
        Decoded { msg, ad }
    }

    /// True when `msg` carries an ad large enough that parsing it belongs
    /// on the blocking pool.
    pub fn is_heavy(msg: &ToGlobal) -> bool {
        match msg {
            ToGlobal::Advertise { ad, .. } => ad.len() > HEAVY_AD_BYTES,
            ToGlobal::Heartbeat { update } => update.len() > HEAVY_AD_BYTES,
            _ => false,
        }
    }
}

/// `ad` (an ad or an update) as machine `name` may send it. The machine's
/// name is the one its link proved (a daemon token is bound to it); an ad
/// whose `Name` says another would match the jobs that ask for that machine
/// (`Name == "m0"`) and so receive their processes and data: refused.
pub(super) fn own_name(name: &str, ad: ClassAd) -> Result<ClassAd, String> {
    if ad.get("Name").is_none() {
        return Ok(ad);
    }
    match ad.eval_attr("Name").as_str() {
        Some(n) if n == name => Ok(ad),
        Some(n) => Err(format!(
            "the ad's Name is `{n}` but this connection is machine `{name}`'s: \
             a machine advertises under its own name only"
        )),
        None => Err(format!(
            "the ad's Name is not a string: it must be \"{name}\", this machine's name"
        )),
    }
}

/// The ad in `text`, or why it is refused. Size and attribute count are
/// checked before parsing: parsing interns every attribute name for the life
/// of the process, so an ad over the limit must not reach the parser at all.
fn check(
    text: &str,
    what: &str,
    (config, names): (&RouterConfig, &NameAllowance),
    parse: impl FnOnce(&str) -> Result<ClassAd, classad::ParseError>,
) -> Result<ClassAd, String> {
    if text.len() > config.max_ad_bytes {
        return Err(format!(
            "the {what} is {} bytes long; at most {} are accepted (max_ad_bytes)",
            text.len(),
            config.max_ad_bytes
        ));
    }
    let too_many = |n: usize| {
        format!(
            "the {what} has {n} attributes; at most {} are accepted (max_ad_attributes)",
            config.max_ad_attributes
        )
    };
    let estimate = count_attributes(text);
    if estimate > config.max_ad_attributes {
        return Err(too_many(estimate));
    }
    let ad = names
        .spend(|| parse(text))
        .map_err(|e| format!("the {what} does not parse: {e}"))?;
    if ad.len() > config.max_ad_attributes {
        return Err(too_many(ad.len()));
    }
    Ok(ad)
}

/// How many attributes `text` holds, without parsing it: in old syntax one
/// per line that is neither blank nor a comment; in new syntax one more than
/// the `;` outside string literals (nested ads' attributes included, since
/// they cost as much). Exact for ads as daemons write them; for others an
/// estimate close enough for a limit of thousands.
pub fn count_attributes(text: &str) -> usize {
    if !text.trim_start().starts_with('[') {
        return text
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
    }
    let (mut count, mut in_string, mut escaped) = (1, false, false);
    for b in text.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (false, _, b'"') => in_string = true,
            (false, _, b';') => count += 1,
            _ => {}
        }
    }
    count
}
