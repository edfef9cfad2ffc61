//! seatfence-proto: the gRPC contract between nodes (`RaftService`) and the
//! node's own API (`NodeService`), generated from `proto/seatfence.proto`
//! with a vendored `protoc`. It must never hold logic: every message is
//! decoded and checked by the crate that serves it.

#![allow(clippy::all)]

pub mod v1 {
    tonic::include_proto!("seatfence.v1");
}
