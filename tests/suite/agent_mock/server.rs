//! A loopback HTTP/1.1 server for the API mocks: plain `std::net`, one
//! thread per connection, keep-alive, `Content-Length` or chunked request
//! bodies, complete answers. Every request is recorded and appended to a
//! JSON-lines log for whoever debugs a failure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// Order of arrival, over all requests.
    pub seq: usize,
    /// Order among main-conversation requests (set by the provider's
    /// responder; None for side queries).
    pub main_seq: Option<usize>,
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn is_main(&self) -> bool {
        self.main_seq.is_some()
    }
}

/// A complete HTTP answer.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Held back this long before answering.
    pub delay: Duration,
    /// Extra headers, `(name, value)`.
    pub headers: Vec<(String, String)>,
}

impl Response {
    pub fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: body.to_string().into_bytes(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// Server-sent events, one `data:` line each.
    pub fn sse<'a>(events: impl IntoIterator<Item = &'a str>) -> Response {
        let mut body = String::new();
        for e in events {
            body.push_str("data: ");
            body.push_str(e);
            body.push_str("\n\n");
        }
        Response {
            status: 200,
            content_type: "text/event-stream",
            body: body.into_bytes(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }
}

/// Decides whether a request is part of the main conversation, then
/// answers it.
pub trait Responder: Send + Sync + 'static {
    fn is_main(&self, request: &Request) -> bool;
    fn respond(&self, request: &Request) -> Response;
}

struct Shared {
    responder: Box<dyn Responder>,
    requests: Mutex<Vec<Request>>,
    log: Mutex<Option<std::fs::File>>,
    seq: AtomicUsize,
    main_seq: AtomicUsize,
    stop: AtomicBool,
}

pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockServer {
    /// Serve on a free port of 127.0.0.1; requests are logged to `log`.
    pub fn start(log: &Path, responder: impl Responder) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the mock API");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            responder: Box::new(responder),
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
        MockServer {
            addr,
            shared,
            threads,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn main_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_main)
            .collect()
    }

    /// One line per request, for failure messages.
    pub fn describe(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                format!(
                    "#{} {} {} main={:?} bytes={}",
                    r.seq,
                    r.method,
                    r.path,
                    r.main_seq,
                    r.body.to_string().len()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for MockServer {
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
        let Some(body) = read_body(&mut reader, &headers) else {
            return;
        };
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        let close = headers
            .get("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let mut request = Request {
            seq: shared.seq.fetch_add(1, Ordering::SeqCst),
            main_seq: None,
            method,
            path,
            headers,
            body,
        };
        if shared.responder.is_main(&request) {
            request.main_seq = Some(shared.main_seq.fetch_add(1, Ordering::SeqCst));
        }
        record(shared, &request);
        // A panicking script must not take the connection's thread down
        // silently: answer 500.
        let response = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.responder.respond(&request)
        }))
        .unwrap_or_else(|_| {
            Response::json(
                500,
                &json!({"error": {"message": "the mock's script panicked", "code": 500}}),
            )
        });
        std::thread::sleep(response.delay);
        let extra: String = response
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncache-control: no-cache\r\n{extra}content-length: {}\r\n\r\n",
            response.status,
            reason(response.status),
            response.content_type,
            response.body.len()
        );
        let written = out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(&response.body))
            .and_then(|()| out.flush());
        if written.is_err() || close {
            return;
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
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

fn record(shared: &Shared, request: &Request) {
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
