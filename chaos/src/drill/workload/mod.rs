//! The drill's clients. Every operation is recorded as an invoke and its
//! completion; an answer that does not settle the outcome (a 5xx, a
//! timeout, a dropped connection) is retried with the same
//! Idempotency-Key a few times and, if still unsettled, recorded as
//! unknown (`info`), never as failed.
//! - buyers: holds on hot and cold events, then cancel, book and pay
//!   (approve at the gateway, the browser callback), read bookings back;
//! - the operator: moves a live event (mostly hot ones) to another region
//!   every few seconds;
//! - the zombie: holds sent straight to a group over gRPC, stamped with an
//!   epoch a finished move replaced (all must be refused);
//! - the observer: every node's view of who leads which group;
//! - the event generations: new events every so often, the previous ones
//!   retired, so seats never run out; beside them, `--sleeping-events`
//!   small events whose groups sleep until a buyer now and then wakes one.
//!
//! One file per actor (`buyers`, `operator`, `zombie`, `observer`,
//! `generations`); the sending and answer helpers they share live here.

mod buyers;
mod generations;
mod observer;
mod operator;
mod zombie;

use hyper::Method;
use serde_json::Value;

use super::World;
use seatfence_testkit::http_client::HttpAnswer;

pub use buyers::buyer;
pub use generations::{create_generation, create_sleepers, generations};
pub use observer::observer;
pub use operator::operator;
pub use zombie::zombie;

/// An answer that settles the outcome, or why none came.
enum Answer {
    Http(HttpAnswer),
    Unknown(String),
}

/// Send until an answer settles the outcome (anything but a 5xx or a
/// transport error), at most `attempts` times.
async fn send(
    w: &World,
    method: Method,
    url: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<&Value>,
    attempts: u32,
) -> Answer {
    let mut why = String::from("not sent");
    for i in 0..attempts {
        match w.http.send(method.clone(), url, token, key, body).await {
            Ok(a) if a.status.is_server_error() => {
                why = format!("{} {}", a.status.as_u16(), a.code().unwrap_or(""));
            }
            Ok(a) => return Answer::Http(a),
            Err(e) => why = format!("{e:#}").chars().take(160).collect(),
        }
        if i + 1 < attempts && !w.pause(250 * u64::from(i + 1)).await {
            break;
        }
    }
    Answer::Unknown(why)
}

/// The error code of a refusal (`http_{status}` when the body names none).
fn code_of(a: &HttpAnswer) -> String {
    a.code()
        .map(str::to_string)
        .unwrap_or_else(|| format!("http_{}", a.status.as_u16()))
}

/// The strings of a JSON array (none if `v` is not one).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
