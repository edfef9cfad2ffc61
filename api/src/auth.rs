//! Bearer tokens: JWT HS256, `sub` is the user id, `role=operator` opens
//! the admin endpoints.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use seatfence_core::UserId;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: UserId,
    pub operator: bool,
}

/// Sign a token for `user` valid for `ttl_secs`.
pub fn mint(secret: &str, user: &str, operator: bool, ttl_secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let claims = Claims {
        sub: user.to_string(),
        exp: now + ttl_secs,
        role: operator.then(|| "operator".to_string()),
    };
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("HS256 signing cannot fail")
}

/// Check the `Authorization` header value.
pub fn verify(secret: &str, header: Option<&str>) -> Result<Caller, ApiError> {
    // The scheme is case-insensitive (RFC 7235).
    let token = header
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .ok_or(ApiError::Unauthorized("missing bearer token"))?;
    let mut v = Validation::new(Algorithm::HS256);
    v.set_required_spec_claims(&["exp", "sub"]);
    let data = decode::<Claims>(token, &DecodingKey::from_secret(secret.as_bytes()), &v)
        .map_err(|_| ApiError::Unauthorized("invalid or expired token"))?;
    let sub = data.claims.sub;
    if sub.is_empty() || sub.len() > 128 || !sub.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::Unauthorized(
            "token subject must be 1-128 printable characters",
        ));
    }
    Ok(Caller {
        user: UserId(sub),
        operator: data.claims.role.as_deref() == Some("operator"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_secret() {
        let t = mint("0123456789abcdef", "alice", false, 60);
        let c = verify("0123456789abcdef", Some(&format!("Bearer {t}"))).unwrap();
        assert_eq!(c.user.0, "alice");
        assert!(!c.operator);
        assert!(verify("another-secret-xx", Some(&format!("Bearer {t}"))).is_err());
        assert!(verify("0123456789abcdef", Some(&format!("bearer {t}"))).is_ok());
        assert!(verify("0123456789abcdef", Some(&format!("BEARER {t}"))).is_ok());
        assert!(verify("0123456789abcdef", Some(&format!("Basic {t}"))).is_err());
        assert!(verify("0123456789abcdef", Some(&t)).is_err());
        let op = mint("0123456789abcdef", "ops", true, 60);
        assert!(
            verify("0123456789abcdef", Some(&format!("Bearer {op}")))
                .unwrap()
                .operator
        );
    }
}
