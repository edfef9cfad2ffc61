//! The edges `seatfence ctl` talks to: `--edge`, else every edge of
//! `demo.json`, the next tried whenever one refuses the connection; and the
//! edge's error answers as errors ([`HttpError`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::anyhow;
use seatfence_testkit::http_client::{HttpAnswer, HttpClient};
use serde_json::{json, Value};

/// One edge ctl may talk to: its URL (no trailing `/`) and, from
/// demo.json, its region.
#[derive(Debug, Clone)]
pub(super) struct EdgeUrl {
    pub(super) region: Option<String>,
    pub(super) url: String,
}

/// The edges to try, in order, and where they come from.
#[derive(Debug, Clone)]
pub(super) struct Edges {
    list: Vec<EdgeUrl>,
    /// From demo.json (not `--edge`): when none answers, the demo is
    /// probably stopped.
    from_demo: bool,
}

impl Edges {
    /// `--edge URL`, alone.
    pub(super) fn given(url: &str) -> Edges {
        Edges {
            list: vec![EdgeUrl {
                region: None,
                url: url.trim_end_matches('/').to_string(),
            }],
            from_demo: false,
        }
    }

    /// demo.json's edges (region → URL), in its order (by region); `None`
    /// when it lists none.
    pub(super) fn demo<'a>(
        edges: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Option<Edges> {
        let list: Vec<EdgeUrl> = edges
            .into_iter()
            .map(|(region, url)| EdgeUrl {
                region: Some(region.clone()),
                url: url.trim_end_matches('/').to_string(),
            })
            .collect();
        (!list.is_empty()).then_some(Edges {
            list,
            from_demo: true,
        })
    }
}

/// A request to send: a GET, or a POST of a JSON body (with an
/// Idempotency-Key when given).
#[derive(Clone, Copy)]
pub(super) enum Req<'a> {
    Get,
    Post {
        key: Option<&'a str>,
        body: &'a Value,
    },
}

/// The edge an event command talks to, and the bearer token it sends: the
/// first of its edges that accepts a connection, kept for the commands'
/// later requests.
pub(super) struct Edge {
    http: HttpClient,
    edges: Edges,
    /// The edge requests go to first (an index into `edges.list`).
    current: AtomicUsize,
    token: String,
}

impl Edge {
    /// Talk to `edges` (the first first) with `token`.
    pub(super) fn new(edges: Edges, token: String) -> Edge {
        Edge {
            http: HttpClient::default(),
            edges,
            current: AtomicUsize::new(0),
            token,
        }
    }

    /// Whether the edges are demo.json's (no `--edge`).
    pub(super) fn uses_demo(&self) -> bool {
        self.edges.from_demo
    }

    /// The URL of the edge requests go to first.
    pub(super) fn url(&self) -> &str {
        &self.edges.list[self.current.load(Ordering::Relaxed)].url
    }

    /// The bearer token it sends.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// Send requests to `region`'s edge first from now on, when demo.json
    /// lists one (the event's owner region: its replicas answer there
    /// without a hop between regions).
    pub(super) fn prefer(&self, region: &str) {
        let at = self
            .edges
            .list
            .iter()
            .position(|e| e.region.as_deref() == Some(region));
        if let Some(at) = at {
            self.current.store(at, Ordering::Relaxed);
        }
    }

    /// GET `path` (`/v1/...`); an error answer is an [`HttpError`].
    pub(super) async fn get(&self, path: &str) -> anyhow::Result<HttpAnswer> {
        check(self.send(path, Req::Get).await?)
    }

    /// POST `body` to `path` (`/v1/...`); an error answer is an
    /// [`HttpError`].
    pub(super) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<HttpAnswer> {
        check(self.send(path, Req::Post { key: None, body }).await?)
    }

    /// Send `req` to `path` at the current edge, whatever it answers; an edge
    /// that refuses the connection (the request never left: safe to send
    /// again) hands it to the next, and the one that answers becomes the
    /// current edge. An error when none answers.
    pub(super) async fn send(&self, path: &str, req: Req<'_>) -> anyhow::Result<HttpAnswer> {
        let n = self.edges.list.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut refused = Vec::new();
        for i in 0..n {
            let at = (first + i) % n;
            let url = format!("{}{path}", self.edges.list[at].url);
            let token = Some(self.token.as_str());
            let sent = match req {
                Req::Get => self.http.get(&url, token).await,
                Req::Post { key, body } => self.http.post(&url, token, key, body).await,
            };
            match sent {
                Err(e) if connection_refused(&e) => refused.push(describe(&self.edges.list[at])),
                Err(e) => return Err(e),
                Ok(answer) => {
                    if !refused.is_empty() {
                        eprintln!(
                            "note: {} refused the connection; {} answered",
                            refused.join(", "),
                            describe(&self.edges.list[at])
                        );
                    }
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(answer);
                }
            }
        }
        Err(self.none_answered(&refused))
    }

    /// The error when every edge refused the connection (`tried`: each, as
    /// [`describe`] names it).
    fn none_answered(&self, tried: &[String]) -> anyhow::Error {
        let tried = tried.join(", ");
        if self.edges.from_demo {
            anyhow!(
                "no edge answered (tried {tried}): is the demo running? start it with \
                 `seatfence demo`, or pass --edge"
            )
        } else {
            anyhow!("no edge answered (tried {tried}): connection refused; is --edge right?")
        }
    }
}

/// An edge as messages name it: `URL (region)`, or the URL.
fn describe(e: &EdgeUrl) -> String {
    match &e.region {
        Some(r) => format!("{} ({r})", e.url),
        None => e.url.clone(),
    }
}

/// Whether `e` is a connection refused (or an unreachable host or
/// network): the request was never sent, so another edge may take it.
fn connection_refused(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{
        AddrNotAvailable, ConnectionRefused, HostUnreachable, NetworkUnreachable,
    };
    e.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable
            )
        })
    })
}

/// An error answer from the edge. [`super::run`] prints it as `error: CODE
/// (STATUS): MESSAGE` on stderr, and with `--json` the edge's error body on
/// stdout too, and exits 1.
#[derive(Debug)]
pub(super) struct HttpError {
    /// The answer (status and body).
    pub(super) answer: HttpAnswer,
    /// Said after the message, in parentheses (e.g. the Idempotency-Key).
    pub(super) note: Option<String>,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.answer.status;
        let error = &self.answer.body["error"];
        match error["code"].as_str() {
            Some(code) => write!(
                f,
                "{code} ({status}): {}",
                error["message"].as_str().unwrap_or("(no message)")
            )?,
            None => write!(f, "{status}: {}", body_text(&self.answer.body))?,
        }
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpError {}

impl HttpError {
    /// The error as one line of JSON: the edge's body, or one of its shape
    /// (`{"error":{"code":"http_STATUS","message":TEXT}}`) when the body is
    /// not a JSON object (a proxy's page, nothing).
    pub(super) fn json_line(&self) -> String {
        match &self.answer.body {
            body @ Value::Object(_) => body.to_string(),
            other => json!({"error": {
                "code": format!("http_{}", self.answer.status.as_u16()),
                "message": body_text(other),
            }})
            .to_string(),
        }
    }
}

/// A body as text: a string as is, nothing as `(no body)`, JSON as JSON.
fn body_text(body: &Value) -> String {
    match body {
        Value::String(s) => s.clone(),
        Value::Null => "(no body)".into(),
        other => other.to_string(),
    }
}

/// `a`, or an [`HttpError`] when it is an error answer.
pub(super) fn check(a: HttpAnswer) -> anyhow::Result<HttpAnswer> {
    if a.status.is_success() {
        Ok(a)
    } else {
        Err(HttpError {
            answer: a,
            note: None,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused connection (nothing listens on the port) is told from any
    /// other failure, through the client's wrapping.
    #[tokio::test]
    async fn a_refused_connection_is_recognised() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let e = HttpClient::default()
            .get(&format!("http://127.0.0.1:{port}/healthz"), None)
            .await
            .expect_err("nothing listens");
        assert!(connection_refused(&e), "{e:#}");
        assert!(!connection_refused(&anyhow!("409 Conflict")));
    }

    /// An error answer reads `CODE (STATUS): MESSAGE`; as JSON it is the
    /// edge's body, or one of its shape when the body is not JSON.
    #[test]
    fn error_answers_read_code_status_message() {
        let answer = |body: Value| HttpAnswer {
            status: hyper::StatusCode::CONFLICT,
            body,
            retry_after: None,
            epoch: None,
            cache_control: None,
            headers: hyper::HeaderMap::new(),
        };
        let body = json!({"error": {"code": "booking_not_refundable", "message": "b1-1 is refunded",
            "status": "refunded"}});
        let e = HttpError {
            answer: answer(body.clone()),
            note: Some("Idempotency-Key k".into()),
        };
        assert_eq!(
            e.to_string(),
            "booking_not_refundable (409 Conflict): b1-1 is refunded (Idempotency-Key k)"
        );
        assert_eq!(e.json_line(), body.to_string());
        let e = HttpError {
            answer: answer(Value::String("upstream down".into())),
            note: None,
        };
        assert_eq!(e.to_string(), "409 Conflict: upstream down");
        assert_eq!(
            e.json_line(),
            r#"{"error":{"code":"http_409","message":"upstream down"}}"#
        );
    }

    /// Every edge refusing: the error names each and how to start the demo.
    #[tokio::test]
    async fn no_edge_answering_says_which_were_tried() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let url = format!("http://127.0.0.1:{port}");
        let edges: std::collections::BTreeMap<String, String> = [
            ("ap-south".to_string(), url.clone()),
            ("us-east".to_string(), format!("{url}/")),
        ]
        .into_iter()
        .collect();
        let edge = Edge::new(Edges::demo(&edges).expect("two edges"), "t".into());
        let e = edge.get("/healthz").await.expect_err("nothing listens");
        let text = e.to_string();
        assert!(
            text.starts_with("no edge answered (tried ")
                && text.contains(&format!("{url} (ap-south), {url} (us-east)"))
                && text.contains("seatfence demo"),
            "{text}"
        );
    }
}
