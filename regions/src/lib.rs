//! seatfence-regions: topology, the directory's routing cache, and ownership
//! moves between regions (DESIGN.md §2, §6).
//!
//! Not built yet: the directory state machine and placement currently live
//! in `seatfence-core` (`Directory`, `Placement`) and run inside group 0 via
//! `seatfence-raft`. The route cache and moves arrive with the ownership
//! issue; until then this crate exports nothing.
