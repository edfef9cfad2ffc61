//! What an error body may carry of what it was told: an excerpt of at
//! most [`MESSAGE_MAX`] characters, and no network address.

/// Longest message an error body carries.
pub const MESSAGE_MAX: usize = 300;

/// `s` cut to at most `max` characters, marked `…` when cut.
pub fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// `s` with every word that looks like a network address (`host:port`, an
/// IPv4 address, a URL) replaced by `[address]`.
pub fn redact_addresses(s: &str) -> String {
    let looks_like_address = |w: &str| {
        let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '[' && c != ']');
        let port = w.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
        });
        let ipv4 = w.split('.').count() == 4 && w.split('.').all(|p| p.parse::<u8>().is_ok());
        port || ipv4 || w.contains("://")
    };
    s.split_inclusive(char::is_whitespace)
        .map(|w| {
            let word = w.trim_end();
            if looks_like_address(word) {
                format!("[address]{}", &w[word.len()..])
            } else {
                w.to_string()
            }
        })
        .collect()
}
