//! [`EventSpec`]: what an operator asks for when creating an event, and its
//! validation. Validation runs at the edge (to answer 400 early) and again
//! inside `apply` (so a bad spec can never reach the replicated state).

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, RegionId};

use super::changes::{MAX_CHANGES_RETENTION_MS, MIN_CHANGES_RETENTION_MS};

/// Largest event this version accepts.
pub const MAX_CAPACITY: u64 = 200_000;
/// Most seats one hold may ask for, whatever the event says.
pub const MAX_SEATS_PER_HOLD_LIMIT: u32 = 100;
/// Hold TTL bounds.
pub const MIN_HOLD_TTL_MS: u64 = 1_000;
/// The longest hold TTL an event may ask for: a day, in ms.
pub const MAX_HOLD_TTL_MS: u64 = 24 * 3600 * 1000;

/// Rows × seats of one named section; its seats are `<name>-<row>-<n>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Section {
    /// 1-16 characters of A-Z a-z 0-9 _, unique within the event.
    pub name: String,
    /// Number of rows, numbered from 1 in seat ids.
    pub rows: u32,
    /// Seats in each row, numbered from 1 in seat ids.
    pub seats_per_row: u32,
}

/// Where an event group's voters go: three nodes of the home region
/// ("zone", the default) or one per region ("region").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Survival {
    /// Three voters in the home region (the default).
    #[default]
    Zone,
    /// Voters spread over the regions, one per region first.
    Region,
}

/// A new event, as the operator describes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventSpec {
    /// The event's id: 1-64 characters of A-Z a-z 0-9 _ -.
    pub event_id: EventId,
    /// Display name, 1-200 characters.
    pub name: String,
    /// The region that owns the event at creation: 1-64 characters of a-z 0-9 -.
    pub home_region: RegionId,
    /// Explicit seat ids (one unnamed section), or empty when `sections` is used.
    pub seats: Vec<String>,
    /// Named sections in layout order, or empty when `seats` is used.
    pub sections: Vec<Section>,
    /// How long a hold lasts before it expires, in ms (1 s to 24 h).
    pub hold_ttl_ms: u64,
    /// Most seats one hold may take (1 to [`MAX_SEATS_PER_HOLD_LIMIT`]).
    pub max_seats_per_hold: u32,
    /// Seats one buyer may have across live holds and bookings.
    pub max_seats_per_buyer: Option<u32>,
    /// When holds are first accepted, in Unix ms; `None`: from creation.
    pub opens_at_ms: Option<u64>,
    /// When holds stop being accepted, in Unix ms (after `opens_at_ms`); `None`: never.
    pub closes_at_ms: Option<u64>,
    /// Where the event group's voters go.
    pub survival: Survival,
    /// Price of one seat, in the currency's minor unit.
    pub price_cents: u64,
    /// ISO 4217 code, e.g. `EUR`.
    pub currency: String,
    /// How long finished records are kept: idempotency keys, ended holds
    /// and their finished bookings, delivered outbox items (see
    /// `retention.rs`). [`DEFAULT_RETENTION_MS`] unless the operator says.
    pub retention_ms: u64,
    /// How long the changefeed keeps a change
    /// ([`DEFAULT_CHANGES_RETENTION_MS`] unless the operator says).
    pub changes_retention_ms: u64,
    /// A waiting room in front of the sale (needs `opens_at_ms`).
    pub waiting_room: Option<super::RoomSettings>,
}

/// Finished records are kept a day unless the event says otherwise.
pub const DEFAULT_RETENTION_MS: u64 = 24 * 3600 * 1000;
/// The shortest retention an event may ask for.
pub const MIN_RETENTION_MS: u64 = 60 * 1000;
/// The longest: a week.
pub const MAX_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// Why a spec is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error, Serialize, Deserialize)]
pub enum SpecError {
    /// `event_id` is empty, over 64 characters, or has other characters.
    #[error("event_id must be 1-64 characters of A-Z a-z 0-9 _ -")]
    BadEventId,
    /// `name` is empty or over 200 characters.
    #[error("name must be 1-200 characters")]
    BadName,
    /// `home_region` is empty, over 64 bytes, or has other characters.
    #[error("home_region must be 1-64 characters of a-z 0-9 -")]
    BadRegion,
    /// Both or neither of `seats` and `sections` were given.
    #[error("give exactly one of seats or sections")]
    SeatsOrSections,
    /// This seat id is empty, over 32 bytes, or has a space or a byte outside printable ASCII.
    #[error("seat id {0:?} must be 1-32 printable characters without spaces")]
    BadSeatId(String),
    /// This seat id appears more than once in `seats`.
    #[error("seat {0:?} is listed twice")]
    DuplicateSeat(String),
    /// This section name is malformed or used by an earlier section.
    #[error("section name {0:?} must be 1-16 characters of A-Z a-z 0-9 _ and unique")]
    BadSection(String),
    /// This section has no rows or no seats per row.
    #[error("section {0:?} needs at least one row and one seat per row")]
    EmptySection(String),
    /// The capacity (saturated at `u64::MAX`) is above [`MAX_CAPACITY`].
    #[error("capacity {0} is above the limit of {MAX_CAPACITY} seats")]
    TooLarge(u64),
    /// `hold_ttl_ms` is outside [`MIN_HOLD_TTL_MS`] to [`MAX_HOLD_TTL_MS`].
    #[error("hold_ttl must be between 1 s and 24 h")]
    BadTtl,
    /// `max_seats_per_hold` is 0 or above [`MAX_SEATS_PER_HOLD_LIMIT`].
    #[error("max_seats_per_hold must be between 1 and {MAX_SEATS_PER_HOLD_LIMIT}")]
    BadMaxPerHold,
    /// `max_seats_per_buyer` is `Some(0)`.
    #[error("max_seats_per_buyer must be at least 1")]
    BadMaxPerBuyer,
    /// `opens_at_ms` is not before `closes_at_ms`.
    #[error("opens_at must be before closes_at")]
    BadWindow,
    /// `price_cents` is above [`MAX_PRICE_CENTS`], or `currency` is not three capital letters.
    #[error("price_cents must be at most {MAX_PRICE_CENTS} and currency three capital letters")]
    BadPrice,
    /// `retention_ms` is outside [`MIN_RETENTION_MS`] to [`MAX_RETENTION_MS`].
    #[error("retention_secs must be between 60 s and 7 days")]
    BadRetention,
    /// `changes_retention_ms` is outside 60 s to 30 days
    /// ([`MIN_CHANGES_RETENTION_MS`], [`MAX_CHANGES_RETENTION_MS`]).
    #[error("changes_retention_secs must be between 60 s and 30 days")]
    BadChangesRetention,
    /// The waiting room's `admit_per_sec` or `ticket_ttl_ms` is out of bounds.
    #[error("waiting_room: admit_per_sec must be between 1 and {max} and ticket_ttl_secs between {min_ttl} s and {max_ttl} s", max = super::MAX_ADMIT_PER_SEC, min_ttl = super::MIN_TICKET_TTL_MS / 1000, max_ttl = super::MAX_TICKET_TTL_MS / 1000)]
    BadWaitingRoom,
    /// A waiting room was asked for without `opens_at_ms`.
    #[error("a waiting_room needs opens_at")]
    WaitingRoomNeedsOpensAt,
}

/// The highest seat price accepted, in minor units.
pub const MAX_PRICE_CENTS: u64 = 100_000_000;

impl SpecError {
    /// The API error code of every spec refusal: `invalid_event`.
    pub fn code(&self) -> &'static str {
        "invalid_event"
    }
}

fn seat_id_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_graphic())
}

impl EventSpec {
    /// Total seats.
    pub fn capacity(&self) -> u64 {
        if self.sections.is_empty() {
            self.seats.len() as u64
        } else {
            // A section's u32 × u32 fits a u64; their sum saturates, so
            // sizes that overflow are too large, never a wrapped small
            // capacity (which would let a huge event pass validation).
            self.sections.iter().fold(0u64, |total, s| {
                total.saturating_add(u64::from(s.rows) * u64::from(s.seats_per_row))
            })
        }
    }

    /// Whether the spec may create an event; `Err` is the first problem found.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !EventId::is_valid(&self.event_id.0) {
            return Err(SpecError::BadEventId);
        }
        if self.name.is_empty() || self.name.chars().count() > 200 {
            return Err(SpecError::BadName);
        }
        let r = &self.home_region.0;
        if r.is_empty()
            || r.len() > 64
            || !r
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(SpecError::BadRegion);
        }
        if self.seats.is_empty() == self.sections.is_empty() {
            return Err(SpecError::SeatsOrSections);
        }
        if self.price_cents > MAX_PRICE_CENTS
            || self.currency.len() != 3
            || !self.currency.bytes().all(|b| b.is_ascii_uppercase())
        {
            return Err(SpecError::BadPrice);
        }
        let capacity = self.capacity();
        if capacity > MAX_CAPACITY {
            return Err(SpecError::TooLarge(capacity));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.seats {
            if !seat_id_ok(s) {
                return Err(SpecError::BadSeatId(s.clone()));
            }
            if !seen.insert(s.as_str()) {
                return Err(SpecError::DuplicateSeat(s.clone()));
            }
        }
        let mut names = std::collections::HashSet::new();
        for s in &self.sections {
            let ok = !s.name.is_empty()
                && s.name.len() <= 16
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok || !names.insert(s.name.as_str()) {
                return Err(SpecError::BadSection(s.name.clone()));
            }
            if s.rows == 0 || s.seats_per_row == 0 {
                return Err(SpecError::EmptySection(s.name.clone()));
            }
        }
        if !(MIN_HOLD_TTL_MS..=MAX_HOLD_TTL_MS).contains(&self.hold_ttl_ms) {
            return Err(SpecError::BadTtl);
        }
        if !(1..=MAX_SEATS_PER_HOLD_LIMIT).contains(&self.max_seats_per_hold) {
            return Err(SpecError::BadMaxPerHold);
        }
        if self.max_seats_per_buyer == Some(0) {
            return Err(SpecError::BadMaxPerBuyer);
        }
        if let (Some(o), Some(c)) = (self.opens_at_ms, self.closes_at_ms) {
            if o >= c {
                return Err(SpecError::BadWindow);
            }
        }
        if !(MIN_RETENTION_MS..=MAX_RETENTION_MS).contains(&self.retention_ms) {
            return Err(SpecError::BadRetention);
        }
        if !(MIN_CHANGES_RETENTION_MS..=MAX_CHANGES_RETENTION_MS)
            .contains(&self.changes_retention_ms)
        {
            return Err(SpecError::BadChangesRetention);
        }
        if let Some(room) = &self.waiting_room {
            room.validate()?;
            if self.opens_at_ms.is_none() {
                return Err(SpecError::WaitingRoomNeedsOpensAt);
            }
        }
        Ok(())
    }

    /// The seats, section by section: `(section name, seat ids in order)`.
    /// Explicit seats form one section named `""`.
    pub fn layout(&self) -> Vec<(String, Vec<String>)> {
        if self.sections.is_empty() {
            return vec![(String::new(), self.seats.clone())];
        }
        self.sections
            .iter()
            .map(|s| {
                let ids = (1..=s.rows)
                    .flat_map(|r| (1..=s.seats_per_row).map(move |n| format!("{}-{r}-{n}", s.name)))
                    .collect();
                (s.name.clone(), ids)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> EventSpec {
        EventSpec {
            event_id: EventId("e1".into()),
            name: "Show".into(),
            home_region: RegionId("us-east".into()),
            seats: vec![],
            sections: vec![Section {
                name: "A".into(),
                rows: 2,
                seats_per_row: 3,
            }],
            hold_ttl_ms: 600_000,
            max_seats_per_hold: 8,
            max_seats_per_buyer: None,
            opens_at_ms: None,
            closes_at_ms: None,
            survival: Survival::Zone,
            price_cents: 5_000,
            currency: "EUR".into(),
            retention_ms: DEFAULT_RETENTION_MS,
            changes_retention_ms: crate::inventory::DEFAULT_CHANGES_RETENTION_MS,
            waiting_room: None,
        }
    }

    #[test]
    fn sections_lay_out_row_by_row() {
        let l = spec().layout();
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].1,
            ["A-1-1", "A-1-2", "A-1-3", "A-2-1", "A-2-2", "A-2-3"]
        );
        assert_eq!(spec().capacity(), 6);
    }

    #[test]
    fn bad_specs_are_refused_with_a_reason() {
        let mut s = spec();
        s.seats = vec!["X".into()];
        assert_eq!(s.validate(), Err(SpecError::SeatsOrSections));
        let mut s = spec();
        s.sections.clear();
        s.seats = vec!["A1".into(), "A1".into()];
        assert_eq!(s.validate(), Err(SpecError::DuplicateSeat("A1".into())));
        let mut s = spec();
        s.sections[0].rows = 100_000;
        assert!(matches!(s.validate(), Err(SpecError::TooLarge(_))));
        // Sizes whose product and sum overflow u64 are too large, never a
        // wrapped small capacity.
        let mut s = spec();
        let huge = Section {
            name: "H".into(),
            rows: u32::MAX,
            seats_per_row: u32::MAX,
        };
        s.sections = (0..4)
            .map(|i| Section {
                name: format!("H{i}"),
                ..huge.clone()
            })
            .collect();
        assert_eq!(s.validate(), Err(SpecError::TooLarge(u64::MAX)));
        let mut s = spec();
        s.event_id = EventId("a b".into());
        assert_eq!(s.validate(), Err(SpecError::BadEventId));
        assert_eq!(spec().validate(), Ok(()));
    }
}
