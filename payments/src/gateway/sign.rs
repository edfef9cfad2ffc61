//! HMAC-SHA256 signatures: per-payment callback signatures and webhook
//! bodies. Comparisons are constant-time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Hex HMAC-SHA256 of `data` under `secret`.
pub fn sign(secret: &str, data: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

/// Whether `signature` (hex) is the HMAC of `data` under `secret`.
pub fn verify(secret: &str, data: &[u8], signature: &str) -> bool {
    let Ok(bytes) = hex::decode(signature) else {
        return false;
    };
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(data);
    mac.verify_slice(&bytes).is_ok()
}

/// Constant-time equality of two strings (signatures we stored).
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The webhook header value: `sha256=<hex>`.
pub fn webhook_header(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", sign(secret, body))
}

/// Check an `X-Gateway-Signature` header against `body`.
pub fn verify_webhook(secret: &str, body: &[u8], header: Option<&str>) -> bool {
    header
        .and_then(|h| h.strip_prefix("sha256="))
        .is_some_and(|sig| verify(secret, body, sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_forgeries_do_not() {
        let h = webhook_header("s3cret-s3cret-s3cret", b"{\"a\":1}");
        assert!(verify_webhook(
            "s3cret-s3cret-s3cret",
            b"{\"a\":1}",
            Some(&h)
        ));
        assert!(!verify_webhook(
            "s3cret-s3cret-s3cret",
            b"{\"a\":2}",
            Some(&h)
        ));
        assert!(!verify_webhook(
            "other-secret-other",
            b"{\"a\":1}",
            Some(&h)
        ));
        assert!(!verify_webhook("s3cret-s3cret-s3cret", b"{\"a\":1}", None));
        assert!(!verify_webhook(
            "s3cret-s3cret-s3cret",
            b"x",
            Some("sha256=zz")
        ));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
