//! A process bound to its job's requests (issue 30), decided purely: the
//! limits its cgroup gets from `request_memory` and `request_cpus`, and what
//! the cgroup's counters mean once it ended. The daemon
//! (`carmi_local::cgroup`) writes and reads the files.
//!
//! Memory is a hard limit at the request, as HTCondor's default
//! (`CGROUP_MEMORY_LIMIT_POLICY = hard`): the kernel stops the job there,
//! before it takes memory others were promised, rather than a poll noticing
//! later that it took it.
//!
//! Going over is read from the kernel's own count of the kills it made for
//! the limit (`oom_kill` in `memory.events` on v2, in `memory.oom_control`
//! on v1), when the process ends and twice a second while it runs: it misses
//! no short spike, as polling the usage would, and it counts only kills
//! (`memory.failcnt` also counts every reclaim at the limit, which a process
//! survives). The usage the hold reason names is the peak the cgroup
//! measured, so it reads as the limit itself: the kernel stopped the job
//! there, before it could take what it tried to.
//!
//! CPU is a weight, not a cap: a job asking for two CPUs gets twice the
//! share of a one-CPU job when they compete, and any idle CPU when they do
//! not.

use carmi_proto::msg::{ProcessUsage, Requests};

/// `cpu.weight` (cgroup v2) of one requested CPU: the kernel's default weight.
pub const WEIGHT_PER_CPU: u64 = 100;
/// `cpu.shares` (cgroup v1) of one requested CPU: the kernel's default shares.
pub const SHARES_PER_CPU: u64 = 1024;

/// What a process's cgroup is set to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Hard memory limit, bytes (`memory.max` v2, `memory.limit_in_bytes` v1).
    pub memory_bytes: Option<u64>,
    /// `cpu.weight` (v2), within the kernel's 1..=10000.
    pub cpu_weight: Option<u64>,
    /// `cpu.shares` (v1), within the kernel's 2..=262144.
    pub cpu_shares: Option<u64>,
}

/// The limits for `requests`: nothing asked, nothing set (the parent's
/// defaults apply).
pub fn limits(requests: &Requests) -> Limits {
    Limits {
        memory_bytes: requests.memory_mib.map(|m| m.saturating_mul(1 << 20)),
        cpu_weight: requests
            .cpus
            .map(|c| c.saturating_mul(WEIGHT_PER_CPU).clamp(1, 10_000)),
        cpu_shares: requests
            .cpus
            .map(|c| c.saturating_mul(SHARES_PER_CPU).clamp(2, 262_144)),
    }
}

/// What a process's cgroup counted, read once everything in it ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Peak memory charged to it, bytes (`memory.peak` v2,
    /// `memory.max_usage_in_bytes` v1); 0 when the kernel does not say.
    pub peak_bytes: u64,
    /// Processes the kernel's OOM killer killed in it for its limit
    /// (`oom_kill` of `memory.events` v2, of `memory.oom_control` v1).
    pub oom_kills: u64,
}

/// The usage an ended process reports: its peak, and whether it went over
/// its `request_memory` (the kernel killed in its cgroup while it was bound
/// to one). A kill with no limit set was the whole machine's shortage, not
/// the job's fault: it does not hold the job.
pub fn usage(counters: &Counters, requests: &Requests) -> ProcessUsage {
    ProcessUsage {
        memory_peak_kib: counters.peak_bytes.div_ceil(1024),
        memory_exceeded_mib: requests.memory_mib.filter(|_| counters.oom_kills > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(memory_mib: Option<u64>, cpus: Option<u64>) -> Requests {
        Requests { memory_mib, cpus }
    }

    #[test]
    fn the_requests_become_a_hard_memory_limit_and_a_cpu_weight() {
        let l = limits(&asked(Some(100), Some(2)));
        assert_eq!(l.memory_bytes, Some(100 << 20));
        assert_eq!((l.cpu_weight, l.cpu_shares), (Some(200), Some(2048)));
        assert_eq!(limits(&Requests::default()), Limits::default());
        let huge = limits(&asked(Some(u64::MAX), Some(1_000_000)));
        assert_eq!(huge.memory_bytes, Some(u64::MAX));
        assert_eq!(
            (huge.cpu_weight, huge.cpu_shares),
            (Some(10_000), Some(262_144))
        );
    }

    #[test]
    fn only_a_kill_under_a_memory_request_is_going_over_it() {
        let killed = Counters {
            peak_bytes: 100 << 20,
            oom_kills: 1,
        };
        let u = usage(&killed, &asked(Some(100), None));
        assert_eq!(
            (u.memory_peak_kib, u.memory_exceeded_mib),
            (102_400, Some(100))
        );
        assert_eq!(u.memory_peak_mib(), 100);
        assert_eq!(
            usage(&killed, &asked(None, Some(1))).memory_exceeded_mib,
            None
        );
        let within = Counters {
            peak_bytes: 1025,
            oom_kills: 0,
        };
        let u = usage(&within, &asked(Some(100), None));
        assert_eq!((u.memory_peak_kib, u.memory_exceeded_mib), (2, None));
    }
}
