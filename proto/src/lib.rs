//! seatfence-proto: the gRPC contract between nodes (`RaftService`) and the
//! node's own API (`NodeService`), generated from `proto/seatfence.proto`
//! with a vendored `protoc`. It must never hold logic: every message is
//! decoded and checked by the crate that serves it.

#![warn(missing_docs)]
#![allow(clippy::all)]

/// The generated messages and services of `seatfence.v1` (documented in
/// `proto/seatfence.proto`).
#[allow(missing_docs)]
pub mod v1 {
    tonic::include_proto!("seatfence.v1");
}
