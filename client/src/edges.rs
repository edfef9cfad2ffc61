//! The edges a client talks to, and which one to ask now.
//!
//! - **By region.** Its own region's edges first (in the order given),
//!   then the other regions'; an edge that stopped answering, or said
//!   `no_leader`/`overloaded`, is passed over for [`DOWN_FOR`] and tried
//!   again after.
//! - **Straight to the leader's edge.** Answers about an event name the
//!   edge on the node that leads its group (`X-Seatfence-Leader-Edge`).
//!   The client keeps that hint per event (and per group, for hold and
//!   booking ids) and sends the next request about it there, like TiKV
//!   client-go's region cache. A hint is dropped when the edge it names
//!   fails, and replaced by the next answer's. A hint is only followed to
//!   an edge the client was given: an answer cannot send the client's
//!   bearer token to an address it does not know.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an edge that failed is passed over.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// Leader hints kept at most; past it the cache starts over (a backend
/// selling many events relearns each from its next answer).
pub const MAX_HINTS: usize = 100_000;

/// One edge: its region and URL (no trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub region: String,
    pub url: String,
}

/// What a request is about, for the hint cache: an event, or an event
/// group (the number in a hold id `h<group>-<seq>` or booking id
/// `b<group>-<seq>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Event(String),
    Group(u64),
}

impl Scope {
    /// The group of a hold or booking id (`h12-3`, `b12-3`).
    pub fn of_id(id: &str) -> Option<Scope> {
        let rest = id.strip_prefix('h').or_else(|| id.strip_prefix('b'))?;
        let (group, seq) = rest.split_once('-')?;
        seq.parse::<u64>().ok()?;
        group.parse().ok().map(Scope::Group)
    }
}

/// The edges, which are passed over until when, and the leader hints.
#[derive(Debug)]
pub struct Edges {
    home: String,
    all: Vec<Edge>,
    down: Mutex<HashMap<String, Instant>>,
    hints: Mutex<HashMap<Scope, String>>,
}

impl Edges {
    /// `edges` (region, URL) with `home`'s preferred; `home` need not be
    /// among them (then every region is equal).
    pub fn new(home: &str, edges: impl IntoIterator<Item = (String, String)>) -> Edges {
        let mut all: Vec<Edge> = Vec::new();
        for (region, url) in edges {
            let url = url.trim_end_matches('/').to_string();
            if !all.iter().any(|e| e.url == url) {
                all.push(Edge { region, url });
            }
        }
        Edges {
            home: home.to_string(),
            all,
            down: Mutex::new(HashMap::new()),
            hints: Mutex::new(HashMap::new()),
        }
    }

    /// One edge per region, as `demo.json`'s `edges` gives them.
    pub fn by_region(home: &str, urls: BTreeMap<String, String>) -> Edges {
        Edges::new(home, urls)
    }

    /// Every edge, in the order given.
    pub fn all(&self) -> &[Edge] {
        &self.all
    }

    /// The edge with this URL, if the client was given it.
    pub fn known(&self, url: &str) -> Option<&Edge> {
        let url = url.trim_end_matches('/');
        self.all.iter().find(|e| e.url == url)
    }

    /// The edges in the order to try them now: the home region's first,
    /// then the others by region name (each region's in the order given);
    /// edges marked down after every edge that is not (so a call still
    /// tries them when all are down).
    pub fn order(&self) -> Vec<Edge> {
        let now = Instant::now();
        let down = self.down.lock().expect("edges lock poisoned");
        let mut v = self.all.clone();
        v.sort_by(|a, b| {
            let key = |e: &Edge| {
                let is_down = down.get(&e.url).is_some_and(|until| *until > now);
                (is_down, e.region != self.home, e.region.clone())
            };
            key(a).cmp(&key(b))
        });
        v
    }

    /// Where to send a request about `scopes` now: the hinted leader's
    /// edge when one is cached and not marked down (`true`), else the
    /// first of [`Edges::order`] (`false`).
    pub fn pick(&self, scopes: &[Scope]) -> Option<(Edge, bool)> {
        let hinted = {
            let hints = self.hints.lock().expect("hints lock poisoned");
            scopes.iter().find_map(|s| hints.get(s).cloned())
        };
        if let Some(url) = hinted {
            if !self.is_down(&url) {
                if let Some(e) = self.known(&url) {
                    return Some((e.clone(), true));
                }
            }
        }
        self.order().into_iter().next().map(|e| (e, false))
    }

    /// An answer about `scopes` named `url` as the leader's edge: cache it
    /// for them, if the client knows that edge (`false`: not followed).
    pub fn hint(&self, scopes: &[Scope], url: &str) -> bool {
        let Some(e) = self.known(url) else {
            return false;
        };
        let mut hints = self.hints.lock().expect("hints lock poisoned");
        if hints.len() + scopes.len() > MAX_HINTS {
            hints.clear();
        }
        for s in scopes {
            if hints.get(s) != Some(&e.url) {
                hints.insert(s.clone(), e.url.clone());
            }
        }
        true
    }

    /// Forget the hints of `scopes` (their edge failed).
    pub fn forget(&self, scopes: &[Scope]) {
        let mut hints = self.hints.lock().expect("hints lock poisoned");
        for s in scopes {
            hints.remove(s);
        }
    }

    /// The cached leader edge of `scope`.
    pub fn hinted(&self, scope: &Scope) -> Option<String> {
        self.hints
            .lock()
            .expect("hints lock poisoned")
            .get(scope)
            .cloned()
    }

    fn is_down(&self, url: &str) -> bool {
        self.down
            .lock()
            .expect("edges lock poisoned")
            .get(url)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Pass over the edge at `url` for [`DOWN_FOR`].
    pub fn mark_down(&self, url: &str) {
        self.down
            .lock()
            .expect("edges lock poisoned")
            .insert(url.to_string(), Instant::now() + DOWN_FOR);
    }

    /// The edge at `url` answered: try it in its turn again.
    pub fn mark_up(&self, url: &str) {
        self.down.lock().expect("edges lock poisoned").remove(url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges() -> Edges {
        let list = [
            ("ap-south", "http://ap/"),
            ("us-east", "http://us1"),
            ("eu-west", "http://eu"),
            ("us-east", "http://us2"),
        ];
        Edges::new(
            "us-east",
            list.into_iter()
                .map(|(r, u)| (r.to_string(), u.to_string())),
        )
    }

    fn urls(e: &Edges) -> Vec<String> {
        e.order().into_iter().map(|e| e.url).collect()
    }

    #[test]
    fn home_first_a_down_edge_last_and_back_when_it_answers() {
        let e = edges();
        assert_eq!(
            urls(&e),
            ["http://us1", "http://us2", "http://ap", "http://eu"]
        );
        e.mark_down("http://us1");
        assert_eq!(
            urls(&e),
            ["http://us2", "http://ap", "http://eu", "http://us1"]
        );
        e.mark_up("http://us1");
        assert_eq!(urls(&e)[0], "http://us1");
    }

    #[test]
    fn a_hint_is_followed_to_a_known_edge_only_and_dropped_on_failure() {
        let e = edges();
        let ev = [Scope::Event("gig".into())];
        assert_eq!(e.pick(&ev).unwrap(), (e.all()[1].clone(), false));
        assert!(!e.hint(&ev, "http://evil.example"), "unknown edge");
        assert_eq!(e.pick(&ev).unwrap().0.url, "http://us1");
        assert!(e.hint(&ev, "http://eu/"));
        assert_eq!(e.pick(&ev).unwrap(), (e.all()[2].clone(), true));
        // A down hinted edge is passed over, the hint kept for later.
        e.mark_down("http://eu");
        assert_eq!(e.pick(&ev).unwrap().0.url, "http://us1");
        e.mark_up("http://eu");
        e.forget(&ev);
        assert_eq!(e.pick(&ev).unwrap().0.url, "http://us1");
    }

    #[test]
    fn hold_and_booking_ids_name_their_group() {
        assert_eq!(Scope::of_id("h12-3"), Some(Scope::Group(12)));
        assert_eq!(Scope::of_id("b7-1"), Some(Scope::Group(7)));
        assert_eq!(Scope::of_id("x7-1"), None);
        assert_eq!(Scope::of_id("h7-"), None);
        assert_eq!(Scope::of_id("h-1"), None);
    }
}
