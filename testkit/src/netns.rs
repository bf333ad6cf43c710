//! Hosts behind a real network boundary: network namespaces on one bridge.
//!
//! A [`Net`] is N network namespaces (`cn{K}h{i}`), each a host with its
//! own address `10.213.K.(i+1)` on a bridge `cnbr{K}` whose own address
//! `10.213.K.254` lets the test process (in the root namespace) reach every
//! host. [`Net::cut`] sets a host's link down (its processes keep running,
//! their packets go nowhere), [`Net::restore`] sets it up again.
//!
//! Everything a net creates is named after its number K, claimed atomically
//! as the directory `/tmp/carmi-netns/K` holding the owner's pid. Dropping the
//! net (also while a test panics) kills every process left in its
//! namespaces, deletes them and the bridge and removes the directory; a
//! net whose owner died (a test killed by a signal) is swept by the next
//! [`Net::create`] in any process. Nets made by hand (`carmi-netns up`) are
//! owned by `manual` and only `carmi-netns down` removes them.
//!
//! Needs root and `ip` (iproute2): [`ready`] says whether a test may run
//! and prints the SKIP line of the CI convention otherwise.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The first two bytes of every net's addresses: a private range unlikely to
/// be routed on a test machine.
const RANGE: [u8; 2] = [10, 213];
/// Nets numbered 1..=MAX_NETS may exist at once.
const MAX_NETS: u8 = 250;

/// Where nets are claimed, one directory per number.
pub fn registry() -> PathBuf {
    PathBuf::from("/tmp/carmi-netns")
}

/// Why a machine cannot make nets, or `None` when it can (root and `ip`).
pub fn missing() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(str::to_string));
    if uid.as_deref() != Some("0") {
        return Some(format!(
            "not root (uid {}): network namespaces need root",
            uid.unwrap_or_else(|| "unknown".into())
        ));
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`ip -V` failed: {}", crate::text(&o.stderr))),
        Err(e) => Some(format!("cannot run `ip` (iproute2): {e}")),
    }
}

/// True when test `test` may run; otherwise prints `SKIP <test>: network
/// namespaces not available (<why>)`, or panics with it when
/// `CARMI_CI_REQUIRE_SERVICES=1` (CI runs as root and must not skip).
pub fn ready(test: &str) -> bool {
    let why = missing().map(|why| format!("network namespaces not available ({why})"));
    crate::skip::ready_unless(test, why)
}

/// Runs `ip ARGS`, returning its stdout or what went wrong.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(crate::text(&out.stdout))
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            crate::text(&out.stderr).trim()
        ))
    }
}

/// [`ip`] for set-up steps, which must work.
fn ip_ok(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("{e}");
    }
}

/// Whether the owner recorded in claim directory `dir` is gone.
fn stale(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("owner")) {
        Ok(owner) if owner.trim() == "manual" => false,
        Ok(owner) => owner
            .trim()
            .parse::<u32>()
            .map_or(true, |pid| !Path::new(&format!("/proc/{pid}")).exists()),
        // Claimed a moment ago and not yet written: leave it to its owner.
        Err(_) => dir
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 60),
    }
}

/// The namespaces of net `k`, as `ip netns list` shows them.
fn namespaces_of(k: u8) -> Vec<String> {
    let prefix = format!("cn{k}h");
    ip(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| {
            n.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

/// Removes net `k` whoever made it: kills the processes in its namespaces
/// (a namespace with a process left keeps its link alive after `ip netns
/// del`), deletes them, the bridge and the claim. Returns what failed.
pub fn teardown(k: u8) -> Vec<String> {
    let failed = clear(k);
    let _ = std::fs::remove_dir_all(registry().join(k.to_string()));
    failed
}

/// Kills the processes in net `k`'s namespaces, deletes them and its
/// bridge, and leaves its claim as it is. Returns what failed.
fn clear(k: u8) -> Vec<String> {
    let mut failed = Vec::new();
    for ns in namespaces_of(k) {
        // Processes may fork while being killed: a few rounds.
        for _ in 0..5 {
            let pids = ip(&["netns", "pids", &ns]).unwrap_or_default();
            let pids: Vec<&str> = pids.split_whitespace().collect();
            if pids.is_empty() {
                break;
            }
            let _ = Command::new("kill").arg("-9").args(&pids).status();
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if let Err(e) = ip(&["netns", "del", &ns]) {
            failed.push(e);
        }
    }
    let bridge = format!("cnbr{k}");
    if ip(&["link", "show", &bridge]).is_ok()
        && let Err(e) = ip(&["link", "del", &bridge])
    {
        failed.push(e);
    }
    failed
}

/// Tears down every net whose owner is gone, and namespaces named like a
/// net's with no claim at all (left by a run killed mid-teardown).
pub fn sweep() {
    let claimed: Vec<u8> = std::fs::read_dir(registry())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    for &k in &claimed {
        if stale(&registry().join(k.to_string())) {
            for e in teardown(k) {
                eprintln!("carmi netns sweep: {e}");
            }
        }
    }
    // Numbers of every namespace named `cn{K}h{I}`, from one listing.
    let mut seen: Vec<u8> = ip(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, i) = l
                .split_whitespace()
                .next()?
                .strip_prefix("cn")?
                .split_once('h')?;
            i.parse::<u16>().ok()?;
            k.parse().ok()
        })
        .collect();
    seen.dedup();
    for k in seen {
        // Checked again now: a net claimed since the listing above is live.
        if !claimed.contains(&k) && !registry().join(k.to_string()).exists() {
            teardown(k);
        }
    }
}

/// Numbers of nets whose links are still in the root namespace after
/// their namespaces were deleted. The kernel keeps a deleted namespace,
/// and the root end of its link, while sockets of its killed processes
/// still hold it (a connection closing toward a host that vanished
/// retransmits for minutes); such a number is skipped until they are gone.
fn lingering_nets() -> Vec<u8> {
    let links = ip(&["-br", "link"]).unwrap_or_default();
    let mut ks: Vec<u8> = links
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().next()?;
            let (k, _) = name
                .split('@')
                .next()?
                .strip_prefix("cn")?
                .split_once('h')?;
            k.parse().ok()
        })
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// One host of a [`Net`].
#[derive(Clone, Debug)]
pub struct Host {
    /// Its network namespace (`ip netns exec NAME ...`).
    pub ns: String,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its link's end in the root namespace, on the bridge: set down to cut the host off.
    pub link: String,
}

/// N hosts on one bridge; see the module documentation.
#[derive(Debug)]
pub struct Net {
    /// Its number K (addresses `10.213.K.x`).
    pub k: u8,
    /// The hosts, host `i` at `10.213.K.(i+1)`.
    pub hosts: Vec<Host>,
    /// Torn down on drop (false for a net made by hand and kept).
    owned: bool,
}

impl Net {
    /// Sweeps stale nets, then claims a free number and makes `n` hosts.
    /// Panics naming the failed command if the kernel refuses.
    pub fn create(n: usize) -> Net {
        Net::create_for(n, &std::process::id().to_string())
    }

    /// [`Net::create`] with `owner` recorded in the claim (`manual`: kept
    /// after this process ends, never swept).
    pub fn create_for(n: usize, owner: &str) -> Net {
        assert!((1..=250).contains(&n), "a net has 1 to 250 hosts, not {n}");
        sweep();
        std::fs::create_dir_all(registry()).expect("create /tmp/carmi-netns");
        let lingering = lingering_nets();
        let k = (1..=MAX_NETS)
            .filter(|k| !lingering.contains(k))
            .find(|k| {
                let dir = registry().join(k.to_string());
                // create_dir is atomic: two processes never claim one number.
                std::fs::create_dir(&dir).is_ok()
                    && std::fs::write(dir.join("owner"), owner).is_ok()
            })
            .expect("every net number 1..=250 is taken (see /tmp/carmi-netns)");
        // Namespaces of this number with no claim (a run killed between
        // deleting its claim and its namespaces) may still be there, and a
        // concurrent sweep skips them once the number is claimed: ours now.
        for e in clear(k) {
            eprintln!("netns: clearing leftovers of net {k}: {e}");
        }
        let mut net = Net {
            k,
            hosts: Vec::new(),
            owned: owner != "manual",
        };
        let bridge = net.bridge();
        let [a, b] = RANGE;
        ip_ok(&["link", "add", &bridge, "type", "bridge"]);
        ip_ok(&[
            "addr",
            "add",
            &format!("{a}.{b}.{k}.254/24"),
            "dev",
            &bridge,
        ]);
        ip_ok(&["link", "set", &bridge, "up"]);
        for i in 0..n {
            let host = Host {
                ns: format!("cn{k}h{i}"),
                ip: Ipv4Addr::new(a, b, k, i as u8 + 1),
                link: format!("cn{k}h{i}"),
            };
            ip_ok(&["netns", "add", &host.ns]);
            let (ns, link) = (host.ns.as_str(), host.link.as_str());
            ip_ok(&[
                "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ]);
            ip_ok(&["link", "set", link, "master", &bridge, "up"]);
            let addr = format!("{}/24", host.ip);
            ip_ok(&["-n", ns, "addr", "add", &addr, "dev", "eth0"]);
            ip_ok(&["-n", ns, "link", "set", "eth0", "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
            net.hosts.push(host);
        }
        net
    }

    /// The bridge's name.
    pub fn bridge(&self) -> String {
        format!("cnbr{}", self.k)
    }

    /// The bridge's address: how hosts reach the root namespace (the test).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(RANGE[0], RANGE[1], self.k, 254)
    }

    /// `program` to run in host `i`'s namespace (`ip netns exec`, which
    /// execs it: the child's pid is the program's).
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.hosts[i].ns]).arg(program);
        cmd
    }

    /// Cuts host `i` off: its link goes down, its processes keep running.
    pub fn cut(&self, i: usize) {
        ip_ok(&["link", "set", &self.hosts[i].link, "down"]);
    }

    /// Connects host `i` again after [`Net::cut`].
    pub fn restore(&self, i: usize) {
        ip_ok(&["link", "set", &self.hosts[i].link, "up"]);
    }

    /// The pids of every process in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<u32> {
        ip(&["netns", "pids", &self.hosts[i].ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Removes the net now, returning what failed (also done on drop).
    pub fn teardown(&mut self) -> Vec<String> {
        self.owned = false;
        teardown(self.k)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if self.owned {
            for e in self.teardown() {
                eprintln!("carmi netns teardown: {e}");
            }
        }
    }
}
