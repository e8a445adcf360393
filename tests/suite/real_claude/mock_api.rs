//! A mock of the Anthropic Messages API on 127.0.0.1, for the real Claude
//! Code CLI (`ANTHROPIC_BASE_URL`). Plain `std::net` and one thread per
//! connection: HTTP/1.1 with keep-alive, `Content-Length` or chunked
//! request bodies, answers with a complete body.
//!
//! Main-conversation requests (`POST /v1/messages` with `tools`) go to the
//! test's script, which answers with a [`Reply`]: an SSE stream of
//! `message_start`, `content_block_start/delta/stop` (text, `tool_use` with
//! `input_json_delta`), `message_delta` (with usage) and `message_stop`, or
//! an error status. Everything else the CLI may send (`count_tokens`, a
//! tool-less side query such as a title, `HEAD` connectivity checks) gets a
//! sensible canned answer. Every request is recorded, and appended to a
//! JSON-lines log for whoever debugs a failure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// Order of arrival, over all requests.
    pub seq: usize,
    /// Order among main-conversation requests (None for the others).
    pub main_seq: Option<usize>,
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

impl ApiRequest {
    pub fn is_main(&self) -> bool {
        self.main_seq.is_some()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The CLI's session id: one per agent process.
    pub fn session(&self) -> Option<&str> {
        self.header("x-claude-code-session-id")
    }

    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or("")
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Assistant turns already in the conversation: 0 for a session's first request.
    pub fn assistant_turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// All text of the first user message (the prompt, with the CLI's reminders).
    pub fn first_user_text(&self) -> String {
        self.messages()
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// All text of the last user message: tool results included, where the
    /// CLI puts messages that arrived on stdin while a tool ran.
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// All text of every message.
    pub fn all_text(&self) -> String {
        self.messages()
            .iter()
            .map(|m| text_of(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `(name, input)` of every tool call the assistant made so far.
    pub fn assistant_tool_uses(&self) -> Vec<(String, Value)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| {
                (
                    b["name"].as_str().unwrap_or("").to_string(),
                    b["input"].clone(),
                )
            })
            .collect()
    }

    /// `(tool_use_id, content, is_error)` of the tool results in the last message.
    pub fn last_tool_results(&self) -> Vec<(String, String, bool)> {
        let Some(last) = self.messages().last() else {
            return Vec::new();
        };
        last["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .map(|b| {
                        (
                            b["tool_use_id"].as_str().unwrap_or("").to_string(),
                            text_of(&b["content"]),
                            b["is_error"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn summary(&self) -> String {
        format!(
            "#{} {} {} model={} tools={} messages={} session={}",
            self.seq,
            self.method,
            self.path,
            self.model(),
            self.body["tools"].as_array().map_or(0, Vec::len),
            self.messages().len(),
            self.session().unwrap_or("-"),
        )
    }
}

/// The text in a message's `content`: a string, or blocks of text and tool
/// results (whose own content is a string or blocks).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or("").to_string(),
                Some("tool_result") => text_of(&b["content"]),
                _ => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One content block of a scripted answer.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    ToolUse { name: String, input: Value },
}

/// The script's answer to one main-conversation request.
#[derive(Debug, Clone)]
pub enum Reply {
    Message {
        blocks: Vec<Block>,
        /// Context occupancy the message reports: what ralph's meter reads.
        occupancy: u64,
        delay: Duration,
        /// Response headers beyond the usual (`anthropic-ratelimit-unified-*`).
        headers: Vec<(String, String)>,
    },
    Error {
        status: u16,
        kind: String,
        message: String,
    },
}

impl Reply {
    /// An assistant message whose usage says `occupancy` tokens are in context.
    pub fn turn(occupancy: u64) -> Reply {
        Reply::Message {
            blocks: Vec::new(),
            occupancy,
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// The subscription usage headers the API sends a claude.ai login
    /// (Claude Code 2.1.328 reads them into `rate_limit_event` lines only
    /// when logged in that way, `CLAUDE_CODE_OAUTH_TOKEN`): the 5-hour and
    /// weekly windows used by these fractions, resetting in 1 h and 3 days.
    pub fn usage_limits(mut self, five_hour: f64, seven_day: f64) -> Reply {
        if let Reply::Message { headers, .. } = &mut self {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let (reset5, reset7) = (now + 3600, now + 3 * 86400);
            let warn = |u: f64| {
                if u >= 0.75 {
                    "allowed_warning"
                } else {
                    "allowed"
                }
            };
            for (k, v) in [
                ("status", "allowed".to_string()),
                ("reset", reset5.to_string()),
                ("5h-utilization", five_hour.to_string()),
                ("5h-reset", reset5.to_string()),
                ("5h-status", warn(five_hour).to_string()),
                ("7d-utilization", seven_day.to_string()),
                ("7d-reset", reset7.to_string()),
                ("7d-status", warn(seven_day).to_string()),
            ] {
                headers.push((format!("anthropic-ratelimit-unified-{k}"), v));
            }
        }
        self
    }

    /// Answer only after `wait`.
    pub fn after(mut self, wait: Duration) -> Reply {
        if let Reply::Message { delay, .. } = &mut self {
            *delay = wait;
        }
        self
    }

    pub fn text(mut self, text: &str) -> Reply {
        if let Reply::Message { blocks, .. } = &mut self {
            blocks.push(Block::Text(text.to_string()));
        }
        self
    }

    pub fn tool(mut self, name: &str, input: Value) -> Reply {
        if let Reply::Message { blocks, .. } = &mut self {
            blocks.push(Block::ToolUse {
                name: name.to_string(),
                input,
            });
        }
        self
    }

    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::Error {
            status,
            kind: kind.to_string(),
            message: message.to_string(),
        }
    }
}

type Script = dyn Fn(&ApiRequest) -> Reply + Send + Sync;
/// A whole HTTP response for a request (another provider's API).
type RawScript = dyn Fn(&ApiRequest) -> Vec<u8> + Send + Sync;

/// Who answers: the Messages API script, or another API's responder.
enum Responder {
    Messages(Box<Script>),
    Raw(Box<RawScript>),
}

struct Shared {
    responder: Responder,
    requests: Mutex<Vec<ApiRequest>>,
    log: Mutex<Option<std::fs::File>>,
    seq: AtomicUsize,
    main_seq: AtomicUsize,
    stop: AtomicBool,
}

pub struct MockApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockApi {
    /// Serve on a free port of 127.0.0.1; requests are logged to `log`.
    pub fn start(
        log: &Path,
        script: impl Fn(&ApiRequest) -> Reply + Send + Sync + 'static,
    ) -> MockApi {
        MockApi::serve(log, Responder::Messages(Box::new(script)))
    }

    /// Serve another API: `respond` gives the whole HTTP response (see
    /// [`http`]); `POST …/responses` counts as a main request.
    pub fn start_raw(
        log: &Path,
        respond: impl Fn(&ApiRequest) -> Vec<u8> + Send + Sync + 'static,
    ) -> MockApi {
        MockApi::serve(log, Responder::Raw(Box::new(respond)))
    }

    fn serve(log: &Path, responder: Responder) -> MockApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the mock API");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            responder,
            requests: Mutex::new(Vec::new()),
            log: Mutex::new(std::fs::File::create(log).ok()),
            seq: AtomicUsize::new(0),
            main_seq: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let shared = shared.clone();
            let threads = threads.clone();
            std::thread::Builder::new()
                .name("mock-api".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if shared.stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        let shared = shared.clone();
                        let handle = std::thread::spawn(move || serve(conn, &shared));
                        threads.lock().unwrap().push(handle);
                    }
                })
                .unwrap()
        };
        MockApi {
            addr,
            shared,
            threads,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<ApiRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn main_requests(&self) -> Vec<ApiRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_main())
            .collect()
    }

    /// One line per request, for failure messages.
    pub fn describe(&self) -> String {
        self.requests()
            .iter()
            .map(ApiRequest::summary)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for MockApi {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor up.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for t in self.threads.lock().unwrap().drain(..) {
            let _ = t.join();
        }
    }
}

/// How long a connection waits for its next request before it checks
/// whether the mock is shutting down.
const POLL: Duration = Duration::from_millis(200);
/// How long the rest of a request may take once it has begun.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn serve(conn: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut out = conn;
    loop {
        // The request line; between requests, poll for shutdown.
        let _ = reader.get_ref().set_read_timeout(Some(POLL));
        let mut line = Vec::new();
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) if line.ends_with(b"\n") => break,
                Ok(_) => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(_) => return,
            }
        }
        let _ = reader.get_ref().set_read_timeout(Some(REQUEST_TIMEOUT));
        let request_line = String::from_utf8_lossy(&line).trim().to_string();
        if request_line.is_empty() {
            continue;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            match reader.read_line(&mut h) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let body = match read_body(&mut reader, &headers) {
            Some(b) => b,
            None => return,
        };
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        let close = headers
            .get("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let is_messages =
            method == "POST" && (path == "/v1/messages" || path.starts_with("/v1/messages?"));
        let main = is_messages && body["tools"].as_array().is_some_and(|t| !t.is_empty())
            || method == "POST" && path.ends_with("/responses");
        let request = ApiRequest {
            seq: shared.seq.fetch_add(1, Ordering::SeqCst),
            main_seq: main.then(|| shared.main_seq.fetch_add(1, Ordering::SeqCst)),
            method,
            path,
            headers,
            body,
        };
        record(shared, &request);
        let response = respond(shared, &request, is_messages);
        if out.write_all(&response).and_then(|()| out.flush()).is_err() || close {
            return;
        }
    }
}

fn read_body(
    reader: &mut BufReader<TcpStream>,
    headers: &BTreeMap<String, String>,
) -> Option<Vec<u8>> {
    if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
    {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = String::new();
                    reader.read_line(&mut t).ok()?;
                    if t.trim().is_empty() {
                        return Some(body);
                    }
                }
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..]).ok()?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf).ok()?;
        }
    }
    let len = headers
        .get("content-length")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

fn record(shared: &Shared, request: &ApiRequest) {
    if let Some(f) = shared.log.lock().unwrap().as_mut() {
        let line = json!({
            "seq": request.seq,
            "main_seq": request.main_seq,
            "method": request.method,
            "path": request.path,
            "headers": request.headers,
            "body": request.body,
        });
        let _ = writeln!(f, "{line}");
    }
    shared.requests.lock().unwrap().push(request.clone());
}

fn respond(shared: &Shared, request: &ApiRequest, is_messages: bool) -> Vec<u8> {
    let id = request.seq;
    let script = match &shared.responder {
        Responder::Messages(script) => script,
        Responder::Raw(respond) => {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| respond(request)))
                .unwrap_or_else(|_| http(500, "text/plain", id, b"the mock's script panicked"));
        }
    };
    match (request.method.as_str(), request.path.as_str()) {
        ("HEAD", _) => http(200, "text/plain", id, &[]),
        ("POST", p) if p.starts_with("/v1/messages/count_tokens") => {
            http(200, "application/json", id, br#"{"input_tokens":1000}"#)
        }
        _ if request.is_main() => {
            // A panicking script must not take the connection's thread down
            // silently: answer 500 and keep the panic text in the log.
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                script(request)
            }))
            .unwrap_or_else(|_| Reply::error(500, "api_error", "the mock's script panicked"));
            render(reply, request)
        }
        _ if is_messages => {
            // A side query (title, summary, quota probe): a short answer.
            let reply = Reply::turn(1000).text("ok");
            render(reply, request)
        }
        _ => http(
            404,
            "application/json",
            id,
            json!({"type": "error", "error": {"type": "not_found_error", "message": format!("the mock has no {}", request.path)}})
                .to_string()
                .as_bytes(),
        ),
    }
}

fn render(reply: Reply, request: &ApiRequest) -> Vec<u8> {
    let id = request.seq;
    match reply {
        Reply::Error {
            status,
            kind,
            message,
        } => {
            let body = json!({"type": "error", "error": {"type": kind, "message": message}});
            http(status, "application/json", id, body.to_string().as_bytes())
        }
        Reply::Message {
            blocks,
            occupancy,
            delay,
            headers,
        } => {
            std::thread::sleep(delay);
            let model = request.model().to_string();
            let input = occupancy.min(100);
            let usage = json!({
                "input_tokens": input,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": occupancy - input,
                "output_tokens": 1,
            });
            let has_tool = blocks.iter().any(|b| matches!(b, Block::ToolUse { .. }));
            let stop_reason = if has_tool { "tool_use" } else { "end_turn" };
            let message_id = format!("msg_e2e_{id:04}");
            if request.body["stream"] != true {
                let content: Vec<Value> = blocks
                    .iter()
                    .enumerate()
                    .map(|(i, b)| block_json(b, id, i))
                    .collect();
                let body = json!({
                    "id": message_id, "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                    "usage": usage,
                });
                return http(200, "application/json", id, body.to_string().as_bytes());
            }
            let mut events = vec![(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": message_id, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
                }}),
            )];
            for (i, b) in blocks.iter().enumerate() {
                match b {
                    Block::Text(t) => {
                        events.push(("content_block_start", json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
                        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}})));
                    }
                    Block::ToolUse { name, input } => {
                        events.push(("content_block_start", json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": tool_id(id, i), "name": name, "input": {}}})));
                        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
                    }
                }
                events.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": i}),
                ));
            }
            events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 40}})));
            events.push(("message_stop", json!({"type": "message_stop"})));
            let mut body = String::new();
            for (name, data) in events {
                body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
            }
            let mut out = http(200, "text/event-stream", id, body.as_bytes());
            if !headers.is_empty() {
                // Before the blank line that ends the head.
                let head_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                let extra: String = headers
                    .iter()
                    .map(|(k, v)| format!("\r\n{k}: {v}"))
                    .collect();
                out.splice(head_end..head_end, extra.into_bytes());
            }
            out
        }
    }
}

fn tool_id(request: usize, block: usize) -> String {
    format!("toolu_e2e_{request:04}_{block}")
}

fn block_json(b: &Block, request: usize, i: usize) -> Value {
    match b {
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::ToolUse { name, input } => {
            json!({"type": "tool_use", "id": tool_id(request, i), "name": name, "input": input})
        }
    }
}

pub fn http(status: u16, content_type: &str, id: usize, body: &[u8]) -> Vec<u8> {
    http_with(status, content_type, id, "", body)
}

/// The same with more headers (`extra`: whole `name: value\r\n` lines).
pub fn http_with(status: u16, content_type: &str, id: usize, extra: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\nrequest-id: req_e2e_{id:04}\r\n{extra}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Where the request log of a test goes.
pub fn log_path(dir: &Path) -> PathBuf {
    dir.join("api-requests.jsonl")
}
