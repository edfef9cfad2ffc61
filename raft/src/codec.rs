//! The one binary codec: [`seatfence_core::format`]'s versioned envelope
//! (a format version byte, then postcard) for values that cross a process
//! boundary (commands, responses, queries and openraft messages inside the
//! gRPC payloads), and the same + LZ4 for the big values written to sled on
//! the hot path (log entries, state machine deltas).
//!
//! Inside one process nothing is encoded: the propose path passes typed
//! values ([`crate::propose`]). Only the gRPC adapters, the cluster client
//! and storage call this module.

use std::io;

use seatfence_core::format::{self, FormatError};

fn invalid(e: FormatError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Encode `v` in the process's active format.
pub fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    format::encode(v).map_err(invalid)
}

/// Decode a value [`encode`] wrote (any format this binary knows);
/// garbage, or a newer format, is an `InvalidData` error saying which.
pub fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    format::decode(b).map_err(invalid)
}

/// The envelope, then LZ4: for the big values written on the hot path (log
/// entries, state machine deltas). They repeat much (ids, key prefixes);
/// compressed, sled copies, checksums and rewrites (when it consolidates a
/// page) about half the bytes. Measured in docs/PERFORMANCE.md.
pub fn encode_compressed<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    Ok(lz4_flex::compress_prepend_size(&encode(v)?))
}

/// Decode a value [`encode_compressed`] wrote.
pub fn decode_compressed<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    let raw = lz4_flex::decompress_size_prepended(b)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    decode(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let v = (7u64, String::from("seat A-1"), vec![1u8, 2, 3]);
        assert_eq!(
            decode::<(u64, String, Vec<u8>)>(&encode(&v).unwrap()).unwrap(),
            v
        );
        let c = encode_compressed(&v).unwrap();
        assert_eq!(decode_compressed::<(u64, String, Vec<u8>)>(&c).unwrap(), v);
        assert!(decode::<(u64, String)>(&[0xff; 3]).is_err());
        assert!(decode_compressed::<u64>(&[0xff; 9]).is_err());
    }

    /// 400 KB of batches nested 200,000 deep: decoding refuses it at the
    /// third level instead of overflowing the stack. Two levels (the
    /// batcher's entry holding a WriteBatch's batch) decode.
    #[test]
    fn nested_batches_are_refused_not_a_stack_overflow() {
        use seatfence_core::Command;
        // Postcard: the variant's index, then the item count, as varints.
        let batch_of_one = |inner: &[u8]| {
            let mut b = vec![3u8, 1]; // Command::Batch, one item
            b.extend(inner);
            b
        };
        let enveloped = |body: &[u8]| [&[format::V1][..], body].concat();
        let put = &encode(&Command::Delete { key: "k".into() }).unwrap()[1..];
        assert!(matches!(
            decode::<Command>(&enveloped(&batch_of_one(&batch_of_one(put)))).unwrap(),
            Command::Batch(v) if matches!(&v[..], [Command::Batch(w)] if w.len() == 1)
        ));
        let mut deep = Vec::with_capacity(2 * 200_000 + 8);
        deep.push(format::V1);
        for _ in 0..200_000 {
            deep.extend([3u8, 1]);
        }
        deep.extend(put);
        let e = decode::<Command>(&deep).unwrap_err();
        assert!(
            e.to_string().contains("batches nest at most two deep"),
            "{e}"
        );
        // The guard is left as it was: the next decode works.
        assert!(decode::<Command>(&enveloped(&batch_of_one(put))).is_ok());
    }
}
