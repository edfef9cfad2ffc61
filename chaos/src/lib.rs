//! seatfence-chaos: the partition-drill harness's library: the history a
//! drill records, the fault schedule, the partition mechanisms, the
//! checkers and the report. The drill itself (processes, nemesis, workload)
//! runs in the `seatfence chaos` subcommand, which starts real node
//! processes through the binary's `LocalCluster`.
//!
//! ```text
//!  schedule (seed) ──▶ nemesis ──▶ net::Partitioner (proxy | iptables), signals, gateway switches
//!  workload clients ──HTTP/gRPC──▶ cluster        every op ──▶ history::Recorder (history.jsonl)
//!  end: heal, converge, dump every replica (final.json) ──▶ check::check_all ──▶ report (html, json)
//! ```
//!
//! The checkers decide from files alone (`run.json`, `history.jsonl`,
//! `final.json`), so a recorded run can be checked again, and each is
//! tested against planted bad histories. Nothing here may weaken what it
//! checks to make a drill pass: an unknown outcome is "may or may not have
//! happened", never "did not".

pub mod check;
pub mod history;
pub mod net;
pub mod report;
pub mod run;
pub mod schedule;
