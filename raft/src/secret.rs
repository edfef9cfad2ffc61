//! [`Secret`]: a secret of the config (`jwt_secret`, `client_secret`,
//! `webhook_secret`). In the TOML it is the value itself, `env:NAME` (read
//! from the environment at start) or `file:/path` (read from the file at
//! start, one trailing newline dropped), so it need not sit in the config
//! file. It never reaches a log or an error body: `Debug` shows
//! `[redacted]`, and an error names the variable or file, never the value.

use serde::{Deserialize, Serialize};

/// A config secret: the value, or an `env:`/`file:` reference to it until
/// [`Secret::resolve`]. `Debug` prints `[redacted]`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret of `value` as is (a reference stays one until [`Secret::resolve`]).
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value (for signing and verifying only).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value an `env:` or `file:` reference names; a plain value as is.
    pub fn resolve(&self) -> Result<Secret, String> {
        if let Some(name) = self.0.strip_prefix("env:") {
            return std::env::var(name)
                .map(Secret)
                .map_err(|_| format!("environment variable {name} is not set (or not UTF-8)"));
        }
        if let Some(path) = self.0.strip_prefix("file:") {
            let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
            let value = text.strip_suffix('\n').unwrap_or(&text);
            return Ok(Secret(
                value.strip_suffix('\r').unwrap_or(value).to_string(),
            ));
        }
        Ok(self.clone())
    }

    /// Length of the value in bytes (of the reference, before [`Secret::resolve`]).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the value (or the unresolved reference) is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_comes_from_the_value_a_file_or_the_environment_and_never_prints() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwt");
        std::fs::write(&path, "from-a-file-0123456789\n").unwrap();
        let s = Secret::new(format!("file:{}", path.display()));
        assert_eq!(s.resolve().unwrap().expose(), "from-a-file-0123456789");
        std::env::set_var("SEATFENCE_TEST_SECRET_X", "from-the-env-0123456789");
        let s = Secret::new("env:SEATFENCE_TEST_SECRET_X");
        assert_eq!(s.resolve().unwrap().expose(), "from-the-env-0123456789");
        let e = Secret::new("env:SEATFENCE_TEST_SECRET_UNSET")
            .resolve()
            .unwrap_err();
        assert!(e.contains("SEATFENCE_TEST_SECRET_UNSET"), "{e}");
        let plain = Secret::new("plain-value-0123456789");
        assert_eq!(plain.resolve().unwrap(), plain);
        assert_eq!(format!("{plain:?}"), "[redacted]");
    }
}
