//! What the run asks of CARMI ([`CarmiCall`]), and the protocol requests
//! each call becomes ([`CarmiCall::into_requests`]): written once, for the
//! WoDi server (which makes them through CARMI's client library) and for the
//! simulator (which hands them to the simulated pool).

use carmi_proto::ids::{HostId, RequestId};
use carmi_proto::msg::{Request, SpawnTarget};
use serde::{Deserialize, Serialize};

/// A request for CARMI (`carmi_api::client::Carmi`'s method of the same name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CarmiCall {
    /// Define a resource class of the job.
    DefineClass {
        /// Its name.
        name: String,
        /// Its ClassAd requirements.
        requirements: String,
    },
    /// Ask for `count` more hosts of `class`, reported one at a time.
    AddHosts {
        /// The class.
        class: String,
        /// How many.
        count: u32,
    },
    /// Withdraw a pending request.
    CancelRequest {
        /// The request.
        request: RequestId,
    },
    /// Never grant these hosts to the class again.
    ExcludeHosts {
        /// The class.
        class: String,
        /// The hosts.
        hosts: Vec<HostId>,
    },
    /// Give hosts back to the pool (their workers are killed with them).
    DelHosts {
        /// The hosts.
        hosts: Vec<HostId>,
    },
    /// Subscribe to these hosts being suspended, resumed and deleted (three
    /// requests, in that order; their ids need no [`Run::issued`](super::Run::issued)).
    WatchHosts {
        /// The hosts.
        hosts: Vec<HostId>,
    },
    /// Ask for a host's machine ad.
    GetHostInfo {
        /// The host.
        host: HostId,
    },
    /// Start a worker process on a host (`class_spawn`).
    Spawn {
        /// The worker executable on the submit machine.
        executable: String,
        /// Its arguments, WoDi's connection argument last.
        args: Vec<String>,
        /// The host.
        host: HostId,
    },
}

/// The protocol requests of one [`CarmiCall`], as its driver makes them.
#[derive(Clone, Debug, PartialEq)]
pub enum CarmiRequests {
    /// One request, whose id the driver reports to [`Run::issued`](super::Run::issued).
    One(Request),
    /// Subscriptions whose ids the run does not need, made in this order.
    Untracked(Box<[Request; 3]>),
    /// Start the worker executable on `target` (reported to
    /// [`Run::issued`](super::Run::issued)): the driver turns the file named
    /// `executable` into what `Request::ClassSpawn` carries (the client library
    /// reads, hashes and uploads it; the simulator has a stand-in).
    Spawn {
        /// The worker executable on the submit machine.
        executable: String,
        /// Its arguments, WoDi's connection argument last.
        args: Vec<String>,
        /// Where it runs.
        target: SpawnTarget,
    },
}

impl CarmiCall {
    /// The requests this call is made of.
    pub fn into_requests(self) -> CarmiRequests {
        let one = match self {
            // The run defines a class when its first master wants it and
            // means its own definition, even over one of the submit file's.
            CarmiCall::DefineClass { name, requirements } => Request::DefineClass {
                name,
                expression: requirements,
                rank: None,
                replace: true,
            },
            CarmiCall::AddHosts { class, count } => Request::AddHosts {
                class,
                count,
                increment: 1,
            },
            CarmiCall::CancelRequest { request } => Request::CancelRequest { request },
            CarmiCall::ExcludeHosts { class, hosts } => Request::ExcludeHosts { class, hosts },
            CarmiCall::DelHosts { hosts } => Request::DelHosts { hosts },
            CarmiCall::WatchHosts { hosts } => {
                return CarmiRequests::Untracked(Box::new([
                    Request::SuspendNotify {
                        hosts: hosts.clone(),
                    },
                    Request::ResumeNotify {
                        hosts: hosts.clone(),
                    },
                    Request::DeleteNotify { hosts },
                ]));
            }
            CarmiCall::GetHostInfo { host } => Request::GetHostInfo { host },
            CarmiCall::Spawn {
                executable,
                args,
                host,
            } => {
                return CarmiRequests::Spawn {
                    executable,
                    args,
                    target: SpawnTarget::Host(host),
                };
            }
        };
        CarmiRequests::One(one)
    }
}
