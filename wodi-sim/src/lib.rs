//! A discrete-event simulator that runs the real cores of CARMI and WoDi
//! together in virtual time: hours of a WoDi run on an opportunistic pool in
//! a fraction of a second, deterministically from a seed.
//!
//! The cores are the ones the daemons run: the global RM's router and
//! allocator (`carmi_global_core::router::Router`), per machine the local RM's
//! core and owner policy (`carmi_local_core::node::Core`,
//! `carmi_local_core::policy::Policy`) fed by an owner model from `owner-model`,
//! and the WoDi server's core ([`wodi_core::run::Run`], the scheduler inside)
//! fed the master's and workers' messages. Every message between them is
//! encoded and decoded on arrival (serde), after a configurable link
//! latency. What is simulated is
//! only what lies outside the cores: owners (an [`owner_model::OwnerModel`]), processes
//! (a worker computes its steps at its host's speed and stops when
//! SIGSTOPped), and a master that runs cycles of steps with times drawn
//! from a [`wodi_core::profile::StepProfile`].
//!
//! Layout: `queue` (the clock and the events), `pool` (the CARMI side),
//! `run` (the WoDi side: server core, workers, master), `sim` (one run),
//! `config` (what a run is given and yields), `presets` (the policy sets
//! compared), [`grants`] (why each host was granted).

mod config;
pub mod grants;
mod pool;
mod presets;
mod queue;
mod run;
mod sim;

pub use carmi_local_core::policy::PolicyConfig;
pub use config::{GrantRules, RunSummary, SimConfig, SimRun};
pub use pool::{MEASURED_EXECUTABLE_FETCH, MEASURED_WORKER_STARTUP, PoolConfig};
pub use presets::{KEEP_GRANT_COST, KEEP_TOLERANCE, Preset};
pub use sim::simulate;

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sim_grants_tests.rs"]
mod grants_rules_tests;
