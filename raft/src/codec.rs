//! The one binary codec: bincode for values that cross a process boundary
//! (commands, responses, queries and openraft messages inside the gRPC
//! payloads), and bincode + LZ4 for the big values written to sled on the
//! hot path (log entries, state machine deltas).
//!
//! Inside one process nothing is encoded: the propose path passes typed
//! values ([`crate::propose`]). Only the gRPC adapters, the cluster client
//! and storage call this module.

use std::io;

/// Encode `v` with bincode.
pub fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    bincode::serialize(v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decode a value [`encode`] wrote; garbage is an `InvalidData` error.
pub fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    bincode::deserialize(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Bincode, then LZ4: for the big values written on the hot path (log
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
}
