//! The waiting rooms' gauges, from the replicas this node leads: a
//! leader-side view the node adds to its edge's `/metrics` scrape.

use seatfence_raft::registry::Registry;

/// The rooms of the events this node leads, at scrape time, from its own
/// replicas: queue length, positions admitted (a counter: its rate is the
/// admission rate), tickets used, admissions lapsed unused, lapsed places
/// joined again.
pub fn metrics(registry: &Registry, now: u64) -> String {
    use std::fmt::Write;
    let mut rows = Vec::new();
    for (gid, g) in registry.all() {
        if gid.is_directory() || !g.leads() {
            continue;
        }
        // Copied under the group's lock (the room is small, the set of used
        // positions a persistent set: its copy is a reference count), and
        // counted after it is released: a scrape never holds applies up
        // for a scan of the places.
        let copy = g.read(|s| {
            let inv = s.state.inventory();
            let (Some(ev), Some(room)) = (inv.event(), inv.room()) else {
                return None;
            };
            Some((
                ev.event_id.0.clone(),
                room.clone(),
                inv.index().used_positions.clone(),
            ))
        });
        rows.extend(copy.map(|(event, room, used)| {
            (
                event,
                room.queue_len(now),
                room.admitted(now),
                room.tickets_used,
                room.lapsed(now, &used),
                room.rejoined,
            )
        }));
    }
    let families = [
        (
            "seatfence_queue_length",
            "gauge",
            "Buyers in the event's waiting room not admitted yet.",
        ),
        (
            "seatfence_queue_admitted_total",
            "counter",
            "Positions of the event's waiting room admitted so far.",
        ),
        (
            "seatfence_queue_tickets_used_total",
            "counter",
            "Admitted buyers of the event who held seats in time.",
        ),
        (
            "seatfence_queue_tickets_lapsed_total",
            "counter",
            "Admitted buyers of the event whose time ran out before they held seats.",
        ),
        (
            "seatfence_queue_rejoined_total",
            "counter",
            "Admitted buyers whose time lapsed and who joined again.",
        ),
    ];
    let mut out = String::new();
    for (i, (name, kind, help)) in families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (event, len, admitted, used, lapsed, rejoined) in &rows {
            let v = [len, admitted, used, lapsed, rejoined][i];
            let _ = writeln!(out, "{name}{{event=\"{event}\"}} {v}");
        }
    }
    out
}
