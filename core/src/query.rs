//! Reads of a group's applied state, answered by `State::query`. The node
//! serves them over `NodeService.Query` (from the leader when the caller
//! asks for a linearizable read).

use serde::{Deserialize, Serialize};

use crate::directory::{Directory, EventRoute};
use crate::ids::EventId;
use crate::inventory::{Event, Hold};
use crate::state::State;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// Event group: the event record.
    Event,
    /// Event group: the event and up to `max_seats` free seat ids.
    Availability { max_seats: u32 },
    /// Event group: one hold.
    Hold(u64),
    /// Directory: one event's route.
    Route(EventId),
    /// Directory: all of it.
    Directory,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryResult {
    Event(Option<Event>),
    Availability {
        event: Option<Event>,
        free_seats: Vec<String>,
    },
    Hold {
        hold: Option<Hold>,
        event_id: Option<EventId>,
    },
    Route(Option<EventRoute>),
    Directory(Directory),
}

impl State {
    pub fn query(&self, q: &Query) -> QueryResult {
        let inv = &self.inventory;
        match q {
            Query::Event => QueryResult::Event(inv.event.clone()),
            Query::Availability { max_seats } => QueryResult::Availability {
                event: inv.event.clone(),
                free_seats: inv.free_seats(*max_seats as usize),
            },
            Query::Hold(seq) => QueryResult::Hold {
                hold: inv.holds.get(seq).cloned(),
                event_id: inv.event.as_ref().map(|e| e.event_id.clone()),
            },
            Query::Route(e) => QueryResult::Route(self.directory.events.get(e).cloned()),
            Query::Directory => QueryResult::Directory(self.directory.clone()),
        }
    }
}
