//! seatfence-api: the regional HTTP edge (DESIGN.md §7, §8).
//!
//! Not built yet: holds, bookings, payments and the mock gateway arrive with
//! the seat-inventory and payments issues. Until then this crate exports
//! nothing, and no HTTP endpoint is served.
