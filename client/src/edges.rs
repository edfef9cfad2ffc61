//! The edges a client talks to, by region: its own region first, another
//! region's while its own is marked down (it stopped answering, or said
//! `no_leader`/`overloaded`), and back once the mark expires.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an edge that failed is passed over.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// Edges by region, and which are passed over until when.
#[derive(Debug)]
pub struct Edges {
    home: String,
    /// Region → edge URL (no trailing `/`).
    urls: BTreeMap<String, String>,
    down: Mutex<BTreeMap<String, Instant>>,
}

impl Edges {
    /// `urls` (region → edge URL) with `home` preferred; `home` need not
    /// be among them (then every region is equal).
    pub fn new(home: &str, urls: BTreeMap<String, String>) -> Edges {
        let urls = urls
            .into_iter()
            .map(|(r, u)| (r, u.trim_end_matches('/').to_string()))
            .collect();
        Edges {
            home: home.to_string(),
            urls,
            down: Mutex::new(BTreeMap::new()),
        }
    }

    /// `(region, URL)` in the order to try them now: the home region
    /// first, then the others by name; regions marked down after every
    /// region that is not (so a call still tries them when all are down).
    pub fn order(&self) -> Vec<(String, String)> {
        let now = Instant::now();
        let down = self.down.lock().expect("edges lock poisoned");
        let mut v: Vec<(String, String)> = self
            .urls
            .iter()
            .map(|(r, u)| (r.clone(), u.clone()))
            .collect();
        v.sort_by_key(|(r, _)| {
            let is_down = down.get(r).is_some_and(|until| *until > now);
            (is_down, *r != self.home)
        });
        v
    }

    /// Pass over `region`'s edge for [`DOWN_FOR`].
    pub fn mark_down(&self, region: &str) {
        self.down
            .lock()
            .expect("edges lock poisoned")
            .insert(region.to_string(), Instant::now() + DOWN_FOR);
    }

    /// `region`'s edge answered: try it in its turn again.
    pub fn mark_up(&self, region: &str) {
        self.down
            .lock()
            .expect("edges lock poisoned")
            .remove(region);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_first_a_down_region_last_and_back_when_it_answers() {
        let urls: BTreeMap<String, String> = [
            ("ap-south", "http://ap/"),
            ("eu-west", "http://eu"),
            ("us-east", "http://us"),
        ]
        .into_iter()
        .map(|(r, u)| (r.to_string(), u.to_string()))
        .collect();
        let e = Edges::new("us-east", urls);
        let regions = |e: &Edges| e.order().into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        assert_eq!(regions(&e), ["us-east", "ap-south", "eu-west"]);
        assert_eq!(e.order()[1].1, "http://ap", "no trailing slash");
        e.mark_down("us-east");
        assert_eq!(regions(&e), ["ap-south", "eu-west", "us-east"]);
        e.mark_up("us-east");
        assert_eq!(regions(&e), ["us-east", "ap-south", "eu-west"]);
    }
}
