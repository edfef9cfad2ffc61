//! Versioned data formats: the bytes of every value a node persists (log
//! entries, state records, snapshots, its store identity) or sends to
//! another node (commands, replies, queries, Raft messages).
//!
//! ```text
//!   envelope v1:  version u8 = 1 | postcard(value)
//!   envelope v2:  version u8 = 2 | postcard(value) | crc32 u32 LE of the value's bytes
//!                 (the next format, which the rolling-upgrade test moves to:
//!                  known only to a build with the `format-next` feature run
//!                  with SEATFENCE_FORMAT_NEXT=1, so one test build can play
//!                  both the old release and the new one)
//! ```
//!
//! Postcard is a serde format with a documented, stable wire specification
//! (varints, length-prefixed sequences, enum variants by index); it
//! replaced bincode 1, which is unmaintained (RUSTSEC-2025-0141).
//!
//! A binary reads every version up to [`newest`] and refuses newer ones
//! with [`FormatError::TooNew`], naming both. It *writes* the cluster's
//! active version ([`active`]), which starts at [`V1`] and is raised only
//! when the directory says so: the operator raises the cluster's version
//! once every node runs a binary that reads it (CockroachDB's cluster
//! version). So during a rolling upgrade old and new binaries exchange
//! and store only what both read, and a node never writes a format its
//! data dir's identity does not name (the node raises the identity first).

use std::sync::atomic::{AtomicU8, Ordering};

use serde::{de::DeserializeOwned, Serialize};

/// A format version.
pub type Version = u8;

/// The first versioned format: postcard behind a version byte.
pub const V1: Version = 1;

/// The newest format this binary reads and may write: [`V1`], or 2 in a
/// `format-next` build whose process has SEATFENCE_FORMAT_NEXT=1.
pub fn newest() -> Version {
    #[cfg(feature = "format-next")]
    {
        static NEXT: std::sync::OnceLock<Version> = std::sync::OnceLock::new();
        *NEXT.get_or_init(|| match std::env::var("SEATFENCE_FORMAT_NEXT").as_deref() {
            Ok("1") => 2,
            _ => V1,
        })
    }
    #[cfg(not(feature = "format-next"))]
    V1
}

/// The version this process writes (see the module doc).
static ACTIVE: AtomicU8 = AtomicU8::new(V1);

/// The version this process writes.
pub fn active() -> Version {
    ACTIVE.load(Ordering::Acquire)
}

/// Write `v` from now on; the active version only rises. A version this
/// binary does not know is refused.
pub fn activate(v: Version) -> Result<(), FormatError> {
    check(v)?;
    ACTIVE.fetch_max(v, Ordering::AcqRel);
    Ok(())
}

/// Whether this binary reads version `v`.
pub fn check(v: Version) -> Result<(), FormatError> {
    match v {
        0 => Err(FormatError::Unknown(0)),
        v if v > newest() => Err(FormatError::TooNew {
            found: v,
            newest: newest(),
        }),
        _ => Ok(()),
    }
}

/// Why bytes could not be read as a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// No bytes at all.
    #[error("empty value (no format version byte)")]
    Empty,
    /// Written by a newer binary than this one.
    #[error(
        "data format v{found} is newer than this binary reads (v{newest} at most): \
         run a seatfence release that knows it"
    )]
    TooNew {
        /// The version the bytes name.
        found: Version,
        /// The newest this binary reads.
        newest: Version,
    },
    /// A version no seatfence ever wrote (0).
    #[error("unknown data format v{0}")]
    Unknown(Version),
    /// The version is known but the bytes are not a value of the type.
    #[error("malformed v{version} value: {reason}")]
    Malformed {
        /// The version the bytes name.
        version: Version,
        /// What the decoder said.
        reason: String,
    },
    /// A value this format cannot hold (never for seatfence's types).
    #[error("cannot encode: {0}")]
    Encode(String),
}

/// `v` in the active format.
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, FormatError> {
    encode_at(active(), v)
}

/// `v` in format `version` (which this binary must know).
pub fn encode_at<T: Serialize + ?Sized>(version: Version, v: &T) -> Result<Vec<u8>, FormatError> {
    check(version)?;
    let mut out =
        postcard::to_extend(v, vec![version]).map_err(|e| FormatError::Encode(e.to_string()))?;
    if version >= 2 {
        let crc = crc32fast::hash(&out[1..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

/// A value [`encode`] wrote, in any version this binary knows. Trailing
/// bytes are refused: they are not something this version wrote.
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, FormatError> {
    let (version, body) = split(b)?;
    let malformed = |reason: String| FormatError::Malformed { version, reason };
    let body = if version >= 2 {
        let (value, crc) = body
            .split_last_chunk::<4>()
            .ok_or_else(|| malformed("shorter than its checksum".into()))?;
        if crc32fast::hash(value) != u32::from_le_bytes(*crc) {
            return Err(malformed("checksum mismatch".into()));
        }
        value
    } else {
        body
    };
    let (value, rest) = postcard::take_from_bytes(body).map_err(|e| {
        // Postcard drops a custom error's message: ours was kept aside.
        let reason = match e {
            postcard::Error::SerdeDeCustom => REFUSAL.with(|r| r.take()).map(str::to_owned),
            _ => None,
        };
        malformed(reason.unwrap_or_else(|| e.to_string()))
    })?;
    if !rest.is_empty() {
        return Err(malformed(format!("{} bytes after the value", rest.len())));
    }
    Ok(value)
}

thread_local! {
    /// The message of the last [`refuse`] on this thread.
    static REFUSAL: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// A custom decoding error whose message [`decode`] reports (postcard
/// itself keeps only "Serde Deserialization Error").
pub fn refuse<E: serde::de::Error>(msg: &'static str) -> E {
    REFUSAL.with(|r| r.set(Some(msg)));
    E::custom(msg)
}

/// The version `b` names (checked), and the bytes after it.
pub fn split(b: &[u8]) -> Result<(Version, &[u8]), FormatError> {
    let (&version, body) = b.split_first().ok_or(FormatError::Empty)?;
    check(version)?;
    Ok((version, body))
}

/// The canonical bytes of `v` for hashing: postcard without an envelope,
/// the same in every version (a stored hash must not change when the
/// active format does).
pub fn canonical<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).expect("seatfence's types always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_name_their_version() {
        let v = (7u64, String::from("seat A-1"), vec![1u8, 2, 3]);
        let b = encode_at(V1, &v).unwrap();
        assert_eq!(b[0], V1);
        assert_eq!(decode::<(u64, String, Vec<u8>)>(&b).unwrap(), v);
        if newest() >= 2 {
            let b2 = encode_at(2, &v).unwrap();
            assert_eq!((b2[0], b2.len()), (2, b.len() + 4));
            assert_eq!(decode::<(u64, String, Vec<u8>)>(&b2).unwrap(), v);
            let mut bad = b2.clone();
            bad[3] ^= 1;
            assert!(matches!(
                decode::<(u64, String, Vec<u8>)>(&bad),
                Err(FormatError::Malformed { version: 2, .. })
            ));
        }
    }

    #[test]
    fn newer_unknown_empty_and_trailing_bytes_are_refused() {
        let mut b = encode_at(V1, &5u32).unwrap();
        b[0] = newest() + 1;
        let e = decode::<u32>(&b).unwrap_err();
        assert_eq!(
            e,
            FormatError::TooNew {
                found: newest() + 1,
                newest: newest()
            }
        );
        assert!(
            e.to_string().contains("newer than this binary reads"),
            "{e}"
        );
        b[0] = 0;
        assert_eq!(decode::<u32>(&b), Err(FormatError::Unknown(0)));
        assert_eq!(decode::<u32>(&[]), Err(FormatError::Empty));
        let mut long = encode_at(V1, &5u32).unwrap();
        long.push(0);
        assert!(matches!(
            decode::<u32>(&long),
            Err(FormatError::Malformed { version: 1, .. })
        ));
        assert!(activate(newest() + 1).is_err());
        assert!(encode_at(newest() + 1, &5u32).is_err());
    }
}
