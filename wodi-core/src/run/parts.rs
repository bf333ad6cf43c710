//! The parts of a [`Run`](super::Run)'s state, each a group of fields that
//! change together: its clock, the outputs waiting their turn, the CARMI
//! requests it made, the status the masters last heard, the classes and
//! their worker commands, its workers' connections, and the open steps.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use bytes::Bytes;
use carmi_proto::ids::{HostId, ProcessId, RequestId};
use carmi_proto::msg::ExitStatus;

use super::{CallId, CarmiCall, Fewest, MasterId, Output, Purpose, Queued};
use crate::ids::{StepId, WorkerId};
use crate::proto::Status;
use crate::sched::Ticket;
use crate::time::Time;

/// The run's time: `now` only moves forward.
#[derive(Debug)]
pub(super) struct Clock {
    /// Latest `now` given; outputs computed while polling use it.
    pub now: Time,
    /// When the first master's `Init` started the run: the scheduler's time zero.
    pub epoch: Time,
}

impl Clock {
    /// The scheduler's time: since the first `Init`.
    pub fn t(&self) -> Time {
        self.now.saturating_sub(self.epoch)
    }

    /// Moves `now` to `now`, never back.
    pub fn advance(&mut self, now: Time) {
        self.now = self.now.max(now);
    }
}

/// Outputs waiting their turn.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// The run's own, in order (statistics computed when their turn comes).
    pub queue: VecDeque<Queued>,
    /// Outputs made from the scheduler's, ready to go.
    pub ready: VecDeque<Output>,
}

/// The CARMI requests the run made, by what each is for.
#[derive(Debug, Default)]
pub(super) struct Requests {
    pub next_call: u64,
    /// Requests asked for whose id the driver has not given yet.
    pub calls: HashMap<CallId, Purpose>,
    pub host_requests: HashMap<RequestId, String>,
    /// Host requests withdrawn (`sched::Output::CancelRequests`).
    pub cancelled: HashSet<RequestId>,
    /// The cancel requests themselves: one may fail because the host
    /// request was answered meanwhile, which is expected, not a problem.
    pub cancels: HashSet<RequestId>,
    pub spawns: HashMap<RequestId, WorkerId>,
    /// The worker each started process is.
    pub processes: HashMap<ProcessId, WorkerId>,
    pub info_requests: HashMap<RequestId, HostId>,
    pub exclusions: HashMap<RequestId, (HostId, String)>,
}

impl Requests {
    /// A new CARMI request, remembered for what it is for.
    pub fn call(&mut self, request: CarmiCall, purpose: Option<Purpose>) -> Output {
        let call = CallId(self.next_call);
        self.next_call += 1;
        if let Some(p) = purpose {
            self.calls.insert(call, p);
        }
        Output::Carmi { call, request }
    }

    /// The driver made the request of `call`, and CARMI's client named it `request`.
    pub fn issued(&mut self, call: CallId, request: RequestId) {
        match self.calls.remove(&call) {
            Some(Purpose::Hosts(class)) => {
                self.host_requests.insert(request, class);
            }
            Some(Purpose::Cancel) => {
                self.cancels.insert(request);
            }
            Some(Purpose::Spawn(worker)) => {
                self.spawns.insert(request, worker);
            }
            Some(Purpose::Info(host)) => {
                self.info_requests.insert(request, host);
            }
            Some(Purpose::Exclude(host, class)) => {
                self.exclusions.insert(request, (host, class));
            }
            None => {}
        }
    }
}

/// The [`Status`] the masters last heard, and the rate limit on the next.
#[derive(Debug)]
pub(super) struct StatusReport {
    /// The last one sent, and when.
    pub last: (Status, Time),
    /// Whether to look at the status once the outputs are drained.
    pub check: bool,
    /// A change held back by the rate limit: when it may go out.
    pub due: Option<Time>,
}

impl StatusReport {
    /// Nothing sent yet; the first change may go out at once.
    pub fn new(now: Time) -> StatusReport {
        StatusReport {
            last: (Status::default(), now),
            check: false,
            due: None,
        }
    }
}

/// The resource classes: how many hosts the masters want of each, the
/// worker command each runs, and which hosts are whose.
#[derive(Debug, Default)]
pub(super) struct Classes {
    /// The first master's worker command, for classes that name none.
    pub executable: String,
    pub args: Vec<String>,
    /// The worker command (executable, arguments) of each class.
    pub commands: BTreeMap<String, (String, Vec<String>)>,
    /// The speed each class declares (`ClassSpec::speed`).
    pub declared_speeds: BTreeMap<String, f64>,
    /// Desired hosts per class, summed over masters.
    pub desired: BTreeMap<String, u32>,
    /// The class each held host was granted for.
    pub host_class: HashMap<HostId, String>,
    /// With `Policies::fewest_hosts`: the rule.
    pub fewest: Option<Fewest>,
}

impl Classes {
    /// The worker command for `host`: its class's own build of the worker,
    /// else the run's.
    pub fn command(&self, host: HostId) -> (String, Vec<String>) {
        self.host_class
            .get(&host)
            .and_then(|c| self.commands.get(c))
            .cloned()
            .unwrap_or_else(|| (self.executable.clone(), self.args.clone()))
    }
}

/// The workers' connections and what they hold.
#[derive(Debug, Default)]
pub(super) struct Workers {
    /// Workers whose connection is up.
    pub connected: BTreeSet<WorkerId>,
    /// Workers whose host CARMI declared lost (cut off, not heard): their
    /// process may still run behind a partition, and whatever it sends
    /// when the link comes back is dropped, never delivered (the step was
    /// re-sent when the host was lost; exactly once across a split).
    pub disowned: BTreeSet<WorkerId>,
    /// Workers in a row whose process exited before it connected (reset by
    /// any worker connecting): a broken worker executable, not churn.
    pub early_deaths: u32,
    /// The master whose init (and cycle) data each worker holds now.
    pub context: HashMap<WorkerId, MasterId>,
    /// The master whose init data the benchmark step runs with.
    pub bench_master: Option<MasterId>,
    /// How a worker's process exited, when the pool said so before the
    /// worker's loss grace ended (the grace's end reads it).
    pub exits: HashMap<WorkerId, ExitStatus>,
    /// Workers lost with no reason given ([`crate::sched::Sched::worker_vanished`]):
    /// their host and the step they were computing, charged if the pool
    /// later reports that the process died on a host still the run's,
    /// forgotten if it reports the host lost.
    pub unexplained: HashMap<WorkerId, (HostId, Ticket)>,
}

/// The open steps: each ticket's data until a worker takes it, and whose step it is.
#[derive(Debug, Default)]
pub(super) struct Tickets {
    pub data: HashMap<Ticket, Bytes>,
    pub steps: HashMap<Ticket, (MasterId, StepId)>,
    /// With `Policies::fewest_hosts`: the steps of the cycle under way (one master).
    pub cycle_steps: Vec<StepId>,
}
