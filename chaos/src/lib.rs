//! seatfence-chaos: the partition-drill harness. It starts clusters with
//! `seatfence_testkit::LocalCluster`; it owns the drill (`drill`: nemesis, workload,
//! settle; the `seatfence chaos` subcommand), the history a drill records,
//! the fault schedule, the partition mechanisms, the checkers and the
//! report.
//!
//! ```text
//!  schedule (seed) ──▶ nemesis ──▶ net::Partitioner (proxy | netns | iptables), signals, gateway switches
//!  workload clients ──HTTP/gRPC──▶ cluster        every op ──▶ history::Recorder (history.jsonl)
//!  end: heal, converge, dump every replica (final.json) ──▶ check::check_all ──▶ report (html, json)
//! ```
//!
//! The checkers decide from files alone (`run.json`, `history.jsonl`,
//! `final.json`), so a recorded run can be checked again, and each is
//! tested against planted bad histories. Nothing here may weaken what it
//! checks to make a drill pass: an unknown outcome is "may or may not have
//! happened", never "did not". No product crate depends on this one.

pub mod check;
pub mod drill;
pub mod history;
pub mod net;
pub mod report;
pub mod run;
pub mod schedule;
