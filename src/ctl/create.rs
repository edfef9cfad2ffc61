//! `seatfence ctl create-event`: the body of `POST /v1/events` from the
//! command's flags (seats or sections, limits, sale window, waiting room),
//! and a summary of what the edge created.

use anyhow::Context;
use serde_json::{json, Value};

use super::edge::Edge;

/// What `create-event` asks for.
pub(super) struct NewEvent {
    /// The event id.
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Its home (owner) region.
    pub region: String,
    /// Explicit seat ids.
    pub seats: Vec<String>,
    /// Sections as `NAME:ROWSxSEATS`.
    pub sections: Vec<String>,
    /// The optional fields of the body, by their names in it; `None`: not
    /// given (the edge's default).
    pub options: Vec<(&'static str, Option<Value>)>,
    /// A waiting room: buyers admitted a second, and how long a ticket is
    /// good for (`None`: the edge's default).
    pub room: Option<(u32, Option<u64>)>,
}

/// A section `NAME:ROWSxSEATS` as the body's `{name, rows, seats_per_row}`.
fn parse_section(s: &str) -> anyhow::Result<Value> {
    let (name, dims) = s
        .split_once(':')
        .with_context(|| format!("section {s:?} is not NAME:ROWSxSEATS"))?;
    let (rows, seats) = dims
        .split_once('x')
        .with_context(|| format!("section {s:?} is not NAME:ROWSxSEATS"))?;
    Ok(json!({"name": name, "rows": rows.parse::<u32>()?, "seats_per_row": seats.parse::<u32>()?}))
}

/// The body's `waiting_room` for `rate` buyers a second and tickets good
/// for `ticket_ttl_secs` (the edge's default when `None`).
fn room_json(rate: u32, ticket_ttl_secs: Option<u64>) -> Value {
    let mut room = json!({"admit_per_sec": rate});
    if let Some(ttl) = ticket_ttl_secs {
        room["ticket_ttl_secs"] = json!(ttl);
    }
    room
}

/// The body of `POST /v1/events`: the event, its explicit seats and
/// sections when given, each option that is set, and the waiting room.
fn event_body(e: &NewEvent) -> anyhow::Result<Value> {
    let mut body = json!({"event_id": e.id, "name": e.name, "home_region": e.region});
    if !e.seats.is_empty() {
        body["seats"] = json!(e.seats);
    }
    if !e.sections.is_empty() {
        let sections = e.sections.iter().map(|s| parse_section(s));
        body["sections"] = Value::Array(sections.collect::<Result<_, _>>()?);
    }
    for (k, v) in &e.options {
        if let Some(v) = v {
            body[*k] = v.clone();
        }
    }
    if let Some((rate, ttl)) = e.room {
        body["waiting_room"] = room_json(rate, ttl);
    }
    Ok(body)
}

/// `create-event`: create the event through the edge of its region (when
/// demo.json lists one); prints the edge's answer as is with `--json`, else
/// a summary.
pub(super) async fn create_event(edge: &Edge, e: NewEvent, as_json: bool) -> anyhow::Result<()> {
    let body = event_body(&e)?;
    edge.prefer(&e.region);
    let a = edge.post("/v1/events", &body).await?;
    if as_json {
        println!("{}", a.body);
        return Ok(());
    }
    println!(
        "created event {} in group {}, owner {}, epoch {}, {} seats",
        a.body["event_id"].as_str().unwrap_or("?"),
        a.body["group_id"],
        a.body["owner_region"].as_str().unwrap_or("?"),
        a.body["epoch"],
        a.body["capacity"]
    );
    if let Some(opens) = body["opens_at"].as_str() {
        let closes = body["closes_at"].as_str().unwrap_or("never");
        println!("  sale opens {opens}, closes {closes}");
    }
    if let Some((rate, ttl)) = e.room {
        let ttl = ttl.map_or("the default".to_string(), |t| format!("{t} s"));
        println!("  waiting room: {rate} a second, tickets good for {ttl}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags map to the create body's own field names; unset options
    /// stay out of it.
    #[test]
    fn the_body_uses_the_api_field_names() {
        let e = NewEvent {
            id: "gig-q".into(),
            name: "Queued gig".into(),
            region: "us-east".into(),
            seats: vec![],
            sections: vec!["A:5x10".into()],
            options: vec![
                ("opens_at", Some(json!("2030-01-01T20:00:00Z"))),
                ("hold_ttl_secs", None),
            ],
            room: Some((2, Some(300))),
        };
        assert_eq!(
            event_body(&e).unwrap(),
            json!({"event_id": "gig-q", "name": "Queued gig", "home_region": "us-east",
                "sections": [{"name": "A", "rows": 5, "seats_per_row": 10}],
                "opens_at": "2030-01-01T20:00:00Z",
                "waiting_room": {"admit_per_sec": 2, "ticket_ttl_secs": 300}})
        );
    }
}
