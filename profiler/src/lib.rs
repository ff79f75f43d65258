//! Bolt's light profiler (Bolt paper §3.2.2): hardware-native candidates from
//! `bolt_codegen::candidates` ranked by an analytic model ([`analytic`]), the top few timed on
//! a GPU ([`timing`], `cuda` feature), the winners kept in a tuning database ([`db`]).
//! [`tune::tune`] runs the whole loop over a list of [`workload::Workload`]s; `bolt-tune` is
//! its command line.

pub mod analytic;
pub mod db;
pub mod device;
pub mod timing;
pub mod tune;
pub mod workload;

pub use analytic::{rank, Ranked};
pub use db::Db;
pub use device::DeviceSpec;
pub use tune::{tune, TuneOptions, TuneResult};
pub use workload::{Problem, Workload};
