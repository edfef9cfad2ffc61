//! The mock's fault switches: what each may be set to, and `PUT /_faults`,
//! which merges a patch and refuses a value the mock does not know.

use bytes::Bytes;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{err, Answer, Mock};

/// Fault switches (`PUT /_faults` merges the fields it is given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// `ok` | `error` (500, nothing created).
    pub create: String,
    /// `ok` | `fail` (payment fails) | `timeout` (captures, answers after
    /// `timeout_ms`) | `hold` (waits until switched back, then captures).
    pub execute: String,
    /// `ok` | `error` (500).
    pub query: String,
    /// `ok` | `error` (500).
    pub refund: String,
    /// `ok` | `error` (500) | `lose` (a capture still held in `execute`
    /// lands first: 409 `already_captured`) | `ignore` (answers `voided`
    /// but leaves the payment capturable: a provider whose void lost a
    /// race it did not report).
    pub void: String,
    /// `deliver` | `drop` | `duplicate` | `delay` (by `webhook_delay_ms`).
    pub webhook: String,
    /// What a payment's answers (execute, void, `GET /v1/payments/{id}`)
    /// say it is for: `ok` (its own amount and currency) | `other` (100
    /// more cents, and `XXX` for the currency) | `omit` (neither field).
    /// The payment itself and its webhook keep the real ones: a provider
    /// that reports a sum it did not agree to, or none.
    pub amount: String,
    pub timeout_ms: u64,
    pub webhook_delay_ms: u64,
    /// Added to every API call.
    pub latency_ms: u64,
}

impl Faults {
    /// The first switch set to a value the mock does not know, if any.
    fn invalid(&self) -> Option<String> {
        let known: [(&str, &str, &[&str]); 7] = [
            ("create", &self.create, &["ok", "error"]),
            ("execute", &self.execute, &["ok", "fail", "timeout", "hold"]),
            ("query", &self.query, &["ok", "error"]),
            ("refund", &self.refund, &["ok", "error"]),
            ("void", &self.void, &["ok", "error", "lose", "ignore"]),
            ("amount", &self.amount, &["ok", "other", "omit"]),
            (
                "webhook",
                &self.webhook,
                &["deliver", "drop", "duplicate", "delay"],
            ),
        ];
        known
            .iter()
            .find(|(_, v, allowed)| !allowed.contains(v))
            .map(|(k, v, allowed)| format!("{k}: {v:?} is not one of {}", allowed.join(", ")))
    }
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            create: "ok".into(),
            execute: "ok".into(),
            query: "ok".into(),
            refund: "ok".into(),
            void: "ok".into(),
            webhook: "deliver".into(),
            amount: "ok".into(),
            timeout_ms: 30_000,
            webhook_delay_ms: 2_000,
            latency_ms: 0,
        }
    }
}

/// A payment's state as the `amount` switch has the mock report it.
pub(super) fn reported(mode: &str, (status, mut body): Answer) -> Answer {
    if status == StatusCode::OK && body.get("status").is_some() {
        match mode {
            "other" => {
                let cents = body["amount_cents"].as_u64().unwrap_or(0);
                body["amount_cents"] = json!(cents.saturating_add(100));
                body["currency"] = json!("XXX");
            }
            "omit" => {
                if let Some(o) = body.as_object_mut() {
                    o.remove("amount_cents");
                    o.remove("currency");
                }
            }
            _ => {}
        }
    }
    (status, body)
}

impl Mock {
    pub(super) fn set_faults(&self, body: &Bytes) -> Answer {
        let mut current = serde_json::to_value(self.faults()).expect("faults serialize");
        let Ok(Value::Object(patch)) = serde_json::from_slice::<Value>(body) else {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "a JSON object of switches is required",
            );
        };
        for (k, v) in patch {
            current[k] = v;
        }
        match serde_json::from_value::<Faults>(current) {
            Ok(f) if f.invalid().is_some() => err(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &f.invalid().unwrap_or_default(),
            ),
            Ok(f) => {
                *self.faults.lock().expect("faults lock poisoned") = f.clone();
                (StatusCode::OK, json!(f))
            }
            Err(e) => err(StatusCode::BAD_REQUEST, "invalid_request", &e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_gateway::MockConfig;
    use std::sync::Arc;
    use std::time::Duration;

    fn mock() -> Arc<Mock> {
        Mock::new(MockConfig {
            public_url: "http://127.0.0.1:1".into(),
            signing_secret: "s".into(),
            webhook_secret: "w".into(),
            client_id: "c".into(),
            client_secret: "cs".into(),
            token_ttl: Duration::from_secs(60),
            grants_per_hour: 5,
        })
    }

    #[test]
    fn unknown_fault_values_are_refused_and_change_nothing() {
        let m = mock();
        let (status, body) = m.set_faults(&Bytes::from(r#"{"execute":"explode"}"#));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.to_string().contains("explode"), "{body}");
        assert_eq!(m.faults(), Faults::default());
        let (status, _) = m.set_faults(&Bytes::from(r#"{"execute":"hold","void":"lose"}"#));
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (m.faults().execute.as_str(), m.faults().void.as_str()),
            ("hold", "lose")
        );
        let (status, _) = m.set_faults(&Bytes::from(r#"{"amount":"half"}"#));
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_amount_switch_changes_what_a_payment_answer_reports() {
        let paid = || {
            (
                StatusCode::OK,
                json!({"status": "completed", "amount_cents": 5000, "currency": "EUR"}),
            )
        };
        assert_eq!(reported("ok", paid()), paid());
        let (_, other) = reported("other", paid());
        assert_eq!(
            (other["amount_cents"].as_u64(), other["currency"].as_str()),
            (Some(5100), Some("XXX"))
        );
        let (_, omitted) = reported("omit", paid());
        assert_eq!(omitted, json!({"status": "completed"}));
        // Errors are not payment answers: left alone.
        let refused = err(StatusCode::CONFLICT, "already_captured", "x");
        assert_eq!(reported("omit", refused.clone()), refused);
    }
}
