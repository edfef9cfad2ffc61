//! What a handler sees and returns: the request ([`Req`]: method, path,
//! headers, the whole body, the caller once verified) and its [`Reply`]
//! (status, body, headers). `http.rs` builds the one and sends the other;
//! handlers depend on this module, not on the server.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::Edge;

/// The largest request body any route reads (1 MiB: an event's creation,
/// with its seat map); each route's own limit is `RouteDef::body_limit`.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// A successful answer.
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, which also decides `Content-Type`.
    pub body: Body,
    /// Extra response headers, name and value; an invalid value is dropped.
    pub headers: Vec<(&'static str, String)>,
}

/// What a reply carries: JSON (the API), or text (probes, metrics).
pub enum Body {
    /// A JSON value, sent as `application/json`.
    Json(Value),
    /// Text sent with the given `Content-Type`.
    Text(String, &'static str),
}

/// The header that marks a replayed answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

impl Reply {
    /// A JSON reply with `status` and no extra headers.
    pub fn json(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            body: Body::Json(body),
            headers: Vec::new(),
        }
    }

    /// A text reply with `status` and `content_type`, and no extra headers.
    pub fn text(status: StatusCode, text: String, content_type: &'static str) -> Reply {
        Reply {
            status,
            body: Body::Text(text, content_type),
            headers: Vec::new(),
        }
    }

    /// Whether it answers a keyed request from its record
    /// (`Idempotent-Replayed: true`).
    pub fn is_replay(&self) -> bool {
        self.headers
            .iter()
            .any(|(k, v)| *k == REPLAYED_HEADER && v == "true")
    }

    /// The reply marked as answering a keyed retry from its record, when
    /// `replayed` (Stripe's `Idempotent-Replayed: true`).
    pub fn replayed(self, replayed: bool) -> Reply {
        if replayed {
            self.header(REPLAYED_HEADER, "true")
        } else {
            self
        }
    }

    /// The reply with header `name: value` added; a later header of the same
    /// name replaces it.
    pub fn header(mut self, name: &'static str, value: impl ToString) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// What a handler gets: the parsed request parts it may need.
pub struct Req {
    /// The HTTP method.
    pub method: Method,
    /// The URI's path, without the query.
    pub path: String,
    /// The URI's query string (after `?`), as sent: not percent-decoded.
    pub query: Option<String>,
    /// The `Authorization` header's value.
    pub auth: Option<String>,
    /// The `Idempotency-Key` header, unchecked (non-UTF-8 bytes replaced);
    /// [`Req::idempotency`] checks it.
    pub idempotency_key: Option<String>,
    /// `X-Gateway-Signature` (webhooks).
    pub gateway_signature: Option<String>,
    /// `Admission-Ticket` (holds in an event with a waiting room).
    pub admission_ticket: Option<String>,
    /// The whole body, at most its route's limit (read only once the
    /// request's head let it in).
    pub body: Bytes,
    /// The caller, once verified (admission verifies before the handler).
    pub(crate) verified: Option<Caller>,
}

impl Req {
    /// The verified caller of the request, or 401 `unauthorized`.
    pub fn caller(&self, edge: &Edge) -> Result<Caller, ApiError> {
        match &self.verified {
            Some(c) => Ok(c.clone()),
            None => edge.tokens.verify(self.auth.as_deref()),
        }
    }

    /// The caller if it is an operator: 401 without a valid token, 403 with
    /// a non-operator one.
    pub fn operator(&self, edge: &Edge) -> Result<Caller, ApiError> {
        let c = self.caller(edge)?;
        if !c.operator {
            return Err(ApiError::Forbidden);
        }
        Ok(c)
    }

    /// The JSON body as `T`; unknown fields and bad JSON are 400s, with
    /// messages in JSON's words, not Rust's: a bad value names its field
    /// (`field quantity: invalid value: integer -1, expected a
    /// non-negative integer`); only malformed JSON says where (line and
    /// column).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let mut de = serde_json::Deserializer::from_slice(&self.body);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| (e.path().to_string(), e.into_inner()))
            .and_then(|v| de.end().map(|()| v).map_err(|e| (".".to_string(), e)))
            .map_err(|(path, e)| {
                let mut msg = in_json_terms(&e.to_string());
                let code = if msg.starts_with("unknown field") {
                    "unknown_field"
                } else if e.is_data() {
                    "invalid_field"
                } else {
                    "malformed_json"
                };
                if code != "malformed_json" {
                    // "… at line 1 column 19" says nothing a client needs
                    // once the field is named.
                    if let Some(at) = msg.rfind(" at line ") {
                        msg.truncate(at);
                    }
                    if path != "." && !msg.starts_with("missing field") {
                        msg = format!("field {path}: {msg}");
                    }
                }
                ApiError::bad(code, msg.replace('`', ""))
            })
    }

    /// `Idempotency-Key`, checked: 1-255 printable ASCII characters; a
    /// leading `~` is reserved for the edge's own keys.
    pub fn idempotency(&self) -> Result<Option<String>, ApiError> {
        match &self.idempotency_key {
            None => Ok(None),
            Some(k)
                if !k.is_empty()
                    && k.len() <= 255
                    && k.bytes().all(|b| b.is_ascii_graphic())
                    && !k.starts_with('~') =>
            {
                Ok(Some(k.clone()))
            }
            Some(_) => Err(ApiError::bad(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-255 printable ASCII characters, not starting with '~'",
            )),
        }
    }

    /// The value of query parameter `name` (first occurrence; `""` when it has
    /// no `=`), not percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }

    /// `?limit=N` of a listing: 100 when absent, 1..=10000, else 400
    /// `invalid_limit`.
    pub fn limit_param(&self) -> Result<u32, ApiError> {
        self.limit_in(100, 1..=10_000)
    }

    /// `?limit=N`: `default` when absent, else within `range` or 400
    /// `invalid_limit` naming the range (every endpoint alike).
    pub fn limit_in(
        &self,
        default: u32,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32, ApiError> {
        match self.query_param("limit") {
            None => Ok(default),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    ApiError::bad(
                        "invalid_limit",
                        format!("limit must be {}..={}", range.start(), range.end()),
                    )
                }),
        }
    }
}

/// A serde message in JSON's words: "expected struct HoldBody with 4
/// elements" → "expected a JSON object", "expected u32" → "expected a
/// non-negative integer".
fn in_json_terms(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find("expected ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "expected ".len()..];
        let word_end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let word = &after[..word_end];
        let (said, skip) = match word {
            "struct" | "map" => {
                // "struct Name" and an optional " with N elements".
                let tail = &after[word_end..];
                let name_end = tail
                    .trim_start()
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map(|n| n + (tail.len() - tail.trim_start().len()))
                    .unwrap_or(tail.len());
                let mut skip = word_end + if word == "struct" { name_end } else { 0 };
                if let Some(w) = after[skip..].strip_prefix(" with ") {
                    if let Some(e) = w.find(" element") {
                        let plural = w[e..].starts_with(" elements");
                        skip += " with ".len() + e + if plural { 9 } else { 8 };
                    }
                }
                ("a JSON object", skip)
            }
            "u8" | "u16" | "u32" | "u64" | "usize" => ("a non-negative integer", word_end),
            "i8" | "i16" | "i32" | "i64" | "isize" => ("an integer", word_end),
            "f32" | "f64" => ("a number", word_end),
            "a" if after[word_end..].starts_with(" sequence") => ("a JSON array", word_end + 9),
            _ => ("", 0),
        };
        if said.is_empty() {
            out.push_str("expected ");
            rest = after;
        } else {
            out.push_str("expected ");
            out.push_str(said);
            rest = &after[skip..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::in_json_terms;

    #[test]
    fn serde_messages_read_in_json_terms() {
        assert_eq!(
            in_json_terms(
                "invalid type: string \"x\", expected struct HoldBody with 4 elements at line 1"
            ),
            "invalid type: string \"x\", expected a JSON object at line 1"
        );
        assert_eq!(
            in_json_terms("invalid value: integer `-1`, expected u32 at line 1 column 9"),
            "invalid value: integer `-1`, expected a non-negative integer at line 1 column 9"
        );
        assert_eq!(
            in_json_terms("invalid type: map, expected a sequence"),
            "invalid type: map, expected a JSON array"
        );
        assert_eq!(in_json_terms("expected a string"), "expected a string");
    }
}
