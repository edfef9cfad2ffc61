//! Whole numbers in request bodies. JSON has one number type: `7` and
//! `7.0` are the same number, and JSON Schema (which docs/openapi.json is
//! written in) calls both integers. A field that takes a count accepts
//! either; a fraction, a negative number or one out of the field's range
//! is refused as before (400 `invalid_field`).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;

/// `#[serde(deserialize_with = "whole::de")]`
pub fn de<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(WholeVisitor(PhantomData))
}

/// `#[serde(default, deserialize_with = "whole::opt")]`: absent or `null`
/// is `None`.
pub fn opt<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<Whole<T>>::deserialize(d).map(|o| o.map(|w| w.0))
}

struct Whole<T>(T);

impl<'de, T: TryFrom<u64>> Deserialize<'de> for Whole<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de(d).map(Whole)
    }
}

struct WholeVisitor<T>(PhantomData<T>);

impl<T: TryFrom<u64>> WholeVisitor<T> {
    fn fit<E: de::Error>(&self, v: u64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), self))
    }
}

impl<T: TryFrom<u64>> Visitor<'_> for WholeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        // Not "from 0 to 4294967295": the field's own range (a quantity
        // from 1) is checked after, and says so.
        match std::any::type_name::<T>() {
            "u32" => f.write_str("a non-negative whole number (at most 4294967295)"),
            _ => f.write_str("a non-negative whole number"),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.fit(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => self.fit(v),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // 2^64 is the first f64 above u64::MAX.
        if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
            self.fit(v as u64)
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "de")]
        n: u32,
        #[serde(default, deserialize_with = "opt")]
        m: Option<u64>,
    }

    fn parse(s: &str) -> Result<Body, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_floats_are_integers_and_fractions_are_not() {
        let b = parse(r#"{"n": 74.0, "m": 5}"#).unwrap();
        assert_eq!((b.n, b.m), (74, Some(5)));
        assert_eq!(parse(r#"{"n": 1e2, "m": null}"#).unwrap().n, 100);
        assert_eq!(parse(r#"{"n": 3}"#).unwrap().m, None);
        for bad in [
            r#"{"n": 7.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": 4294967296}"#,
            r#"{"n": 1e300}"#,
            r#"{"n": "7"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.contains("a non-negative whole number (at most 4294967295)"),
                "{bad}: {e}"
            );
        }
        assert!(parse(r#"{"n": 1, "m": -2.0}"#)
            .unwrap_err()
            .contains("non-negative whole number"));
    }
}
