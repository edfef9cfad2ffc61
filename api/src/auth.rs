//! Bearer tokens: JWT HS256, `sub` is the user id, `role=operator` opens
//! the admin endpoints.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use seatfence_core::UserId;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The claims of a bearer token (JWT HS256).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Subject: the user id, 1–128 printable ASCII characters.
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// `Some("operator")` opens the admin endpoints; any other value or
    /// `None` is a buyer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The user id, from the token's `sub`.
    pub user: UserId,
    /// Whether the token's `role` is `operator`.
    pub operator: bool,
}

/// Sign a token for `user` valid for `ttl_secs`.
pub fn mint(secret: &str, user: &str, operator: bool, ttl_secs: u64) -> String {
    let now = now_secs();
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

/// The token of an `Authorization` header value (the scheme is
/// case-insensitive, RFC 7235).
fn bearer(header: Option<&str>) -> Result<&str, ApiError> {
    header
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .ok_or(ApiError::Unauthorized("missing bearer token"))
}

/// Seconds a token stays valid past its `exp` (jsonwebtoken's default
/// leeway, which [`verify`] keeps; the cache keeps the same rule).
const LEEWAY_SECS: u64 = 60;

/// Check the `Authorization` header value.
pub fn verify(secret: &str, header: Option<&str>) -> Result<Caller, ApiError> {
    verify_token(secret, bearer(header)?).map(|(caller, _)| caller)
}

/// Verify `token`: the caller and the token's `exp`.
fn verify_token(secret: &str, token: &str) -> Result<(Caller, u64), ApiError> {
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = LEEWAY_SECS;
    v.set_required_spec_claims(&["exp", "sub"]);
    let data = decode::<Claims>(token, &DecodingKey::from_secret(secret.as_bytes()), &v)
        .map_err(|_| ApiError::Unauthorized("invalid or expired token"))?;
    let sub = data.claims.sub;
    if sub.is_empty() || sub.len() > 128 || !sub.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::Unauthorized(
            "token subject must be 1-128 printable characters",
        ));
    }
    let caller = Caller {
        user: UserId(sub),
        operator: data.claims.role.as_deref() == Some("operator"),
    };
    Ok((caller, data.claims.exp))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Tokens this edge verified, so a buyer's next request skips the HMAC
/// and the claims' JSON (a bearer sends the same token for its whole
/// session). Keyed by the whole token string, so only the exact bytes
/// that verified hit; only verified tokens enter (garbage cannot fill
/// it); each hit checks the token's `exp` as [`verify`] does. Two
/// generations of at most `cap` tokens each: when the newer fills up,
/// the older is dropped, so memory is bounded and busy tokens stay.
pub struct TokenCache {
    /// The secret every cached token verified with.
    secret: seatfence_raft::secret::Secret,
    cap: usize,
    inner: std::sync::Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    young: std::collections::HashMap<String, (Caller, u64)>,
    old: std::collections::HashMap<String, (Caller, u64)>,
}

/// Tokens per generation of the edge's [`TokenCache`].
pub const TOKEN_CACHE: usize = 50_000;

impl TokenCache {
    /// A cache of tokens verified with `secret`.
    pub fn new(secret: seatfence_raft::secret::Secret, cap: usize) -> TokenCache {
        TokenCache {
            secret,
            cap: cap.max(1),
            inner: Default::default(),
        }
    }

    /// [`verify`] with the cache's secret, answered from the cache when
    /// this exact token verified before and has not expired.
    pub fn verify(&self, header: Option<&str>) -> Result<Caller, ApiError> {
        let token = bearer(header)?;
        let now = now_secs();
        let fresh = |exp: u64| exp.saturating_add(LEEWAY_SECS) >= now;
        {
            let mut g = self.inner.lock().expect("token cache lock poisoned");
            if let Some((caller, _)) = g.young.get(token).filter(|(_, e)| fresh(*e)) {
                return Ok(caller.clone());
            }
            if let Some((caller, exp)) = g.old.remove(token).filter(|(_, e)| fresh(*e)) {
                let hit = caller.clone();
                g.young.insert(token.to_string(), (caller, exp));
                return Ok(hit);
            }
        }
        let (caller, exp) = verify_token(self.secret.expose(), token)?;
        let dropped = {
            let mut g = self.inner.lock().expect("token cache lock poisoned");
            let dropped = if g.young.len() >= self.cap {
                let young = std::mem::take(&mut g.young);
                Some(std::mem::replace(&mut g.old, young))
            } else {
                None
            };
            g.young.insert(token.to_string(), (caller.clone(), exp));
            dropped
        };
        // The old generation is freed outside the lock.
        drop(dropped);
        Ok(caller)
    }

    /// Tokens held (both generations).
    pub fn len(&self) -> usize {
        let g = self.inner.lock().expect("token cache lock poisoned");
        g.young.len() + g.old.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    #[test]
    fn the_cache_answers_as_verify_does() {
        let secret = "0123456789abcdef";
        let cache = TokenCache::new(seatfence_raft::secret::Secret::new(secret), 2);
        let alice = format!("Bearer {}", mint(secret, "alice", false, 60));
        for _ in 0..3 {
            assert_eq!(cache.verify(Some(&alice)).unwrap().user.0, "alice");
        }
        assert_eq!(cache.len(), 1);
        // Another secret's token, a tampered one, garbage: refused, not kept.
        let other = format!("Bearer {}", mint("another-secret-xx", "alice", false, 60));
        assert!(cache.verify(Some(&other)).is_err());
        let mut tampered = alice.clone();
        tampered.pop();
        assert!(cache.verify(Some(&tampered)).is_err());
        assert!(cache.verify(Some("Bearer x.y.z")).is_err());
        assert!(cache.verify(None).is_err());
        assert_eq!(cache.len(), 1);
        // Expired beyond the leeway: refused even though it once verified.
        let claims = Claims {
            sub: "bob".into(),
            exp: now_secs() - LEEWAY_SECS - 5,
            role: None,
        };
        let expired = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap();
        let expired = format!("Bearer {expired}");
        assert!(cache.verify(Some(&expired)).is_err());
        cache.inner.lock().unwrap().young.insert(
            expired["Bearer ".len()..].to_string(),
            (
                Caller {
                    user: UserId("bob".into()),
                    operator: false,
                },
                claims.exp,
            ),
        );
        assert!(cache.verify(Some(&expired)).is_err());
        // Bounded: two generations of two.
        for u in ["c", "d", "e", "f", "g"] {
            let t = format!("Bearer {}", mint(secret, u, false, 60));
            cache.verify(Some(&t)).unwrap();
        }
        assert!(cache.len() <= 4, "{} tokens kept", cache.len());
    }
}
