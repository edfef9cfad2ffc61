//! seatfence-chaos: the partition-drill harness (supervisor, nemesis,
//! workload, history, checkers, report).
//!
//! Not built yet: arrives with the chaos issue. Until then this crate
//! exports nothing.
