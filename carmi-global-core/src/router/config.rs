//! The router's settings.

use std::time::Duration;

use super::{
    CUT_OFF_LIMIT, DEFAULT_STORE_KEEP, MAX_AD_ATTRIBUTES, MAX_AD_BYTES,
    MAX_NEW_NAMES_PER_CONNECTION,
};

/// Settings of the router.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Heartbeat period asked of local RMs.
    pub heartbeat: Duration,
    /// A machine silent for this many periods is lost.
    pub missed_heartbeats: u32,
    /// Most slots one machine may advertise (guards memory against a bad ad).
    pub max_slots: u32,
    /// Wall-clock time, seconds since the Unix epoch, at `now == 0`: the
    /// router's clock is monotonic, and `carmi history` shows when jobs ended.
    /// The router reads no clock: its driver sets this as it starts the
    /// router (0 by default, which tests and simulators keep).
    pub started_unix: u64,
    /// Most attributes in a machine ad or heartbeat update ([`MAX_AD_ATTRIBUTES`]).
    pub max_ad_attributes: usize,
    /// Most bytes of text in a machine ad or heartbeat update ([`MAX_AD_BYTES`]).
    pub max_ad_bytes: usize,
    /// Most attribute names new to this process that one connection's ads
    /// may bring over its life ([`MAX_NEW_NAMES_PER_CONNECTION`]).
    pub max_new_names_per_connection: usize,
    /// Users' fair-share usage halves every this long (HTCondor's
    /// `PRIORITY_HALFLIFE`; [`crate::usage::DEFAULT_HALF_LIFE`], a day).
    pub priority_half_life: Duration,
    /// How long every machine may be silent at once, taken for this global
    /// RM's own cut from the network, before they are declared lost
    /// ([`CUT_OFF_LIMIT`], 10 min; zero: never taken for a cut).
    pub cut_off_limit: Duration,
    /// How long a file in the executable store that no live job refers to
    /// is kept after its last use ([`DEFAULT_STORE_KEEP`]); then it is removed.
    pub store_keep: Duration,
    /// The admin's concurrency limits (`--concurrency-limit NAME=N`,
    /// `--concurrency-limit-default N`): how many running jobs may take
    /// each named resource at once (see `alloc::concurrency`).
    pub concurrency_limits: crate::alloc::ConcurrencyConfig,
    /// How often jobs' `periodic_hold`, `periodic_release` and
    /// `periodic_remove` are evaluated ([`PERIODIC_EXPR_INTERVAL`]; HTCondor's
    /// `PERIODIC_EXPR_INTERVAL`, `router/jobs/policy.rs`).
    pub policy_interval: Duration,
}

/// How often jobs' periodic expressions are evaluated by default: 2 s, so
/// that `periodic_remove = (time() - QDate) > 5` acts within a few seconds
/// of its deadline (HTCondor's default is 60 s; the cost is one job ad
/// built per job with such an expression each time).
pub const PERIODIC_EXPR_INTERVAL: Duration = Duration::from_secs(2);

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            heartbeat: Duration::from_millis(1000),
            missed_heartbeats: 3,
            max_slots: carmi_proto::limits::MAX_SLOTS_PER_MACHINE,
            started_unix: 0,
            max_ad_attributes: MAX_AD_ATTRIBUTES,
            max_ad_bytes: MAX_AD_BYTES,
            max_new_names_per_connection: MAX_NEW_NAMES_PER_CONNECTION,
            priority_half_life: crate::usage::DEFAULT_HALF_LIFE,
            cut_off_limit: CUT_OFF_LIMIT,
            store_keep: DEFAULT_STORE_KEEP,
            concurrency_limits: Default::default(),
            policy_interval: PERIODIC_EXPR_INTERVAL,
        }
    }
}
