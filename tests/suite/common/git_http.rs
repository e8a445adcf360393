//! git's smart HTTP on 127.0.0.1: a tiny server that runs `git
//! http-backend` (a CGI program that ships with git) for every request, and
//! asks for HTTP Basic credentials (`USER`:`PASSWORD`) before anything —
//! so a client gets in only through its credential helper, as with a real
//! forge. One connection per request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

pub const USER: &str = "ralph";
pub const PASSWORD: &str = "hunter2";
/// `USER:PASSWORD` in base64.
const BASIC: &str = "Basic cmFscGg6aHVudGVyMg==";

pub struct GitHttp {
    /// `http://127.0.0.1:PORT/` — append a repository's name under `root`.
    pub url: String,
    /// (method, path, status) of every request.
    log: Arc<Mutex<Vec<(String, String, u16)>>>,
}

impl GitHttp {
    /// Serve the repositories under `root`.
    pub fn start(root: &Path) -> GitHttp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let root = root.to_path_buf();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, root) = (seen.clone(), root.clone());
                std::thread::spawn(move || serve(stream, &root, &seen));
            }
        });
        GitHttp { url, log }
    }

    pub fn log(&self) -> Vec<(String, String, u16)> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(stream: std::net::TcpStream, root: &PathBuf, log: &Mutex<Vec<(String, String, u16)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let target = words.next().unwrap_or("").to_string();
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let body = read_body(
        &mut reader,
        &header("content-length"),
        &header("transfer-encoding"),
    );
    if header("authorization").as_deref() != Some(BASIC) {
        log.lock().unwrap().push((method, target, 401));
        let _ = out.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut cgi = Command::new("git");
    cgi.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", USER)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = header("content-type") {
        cgi.env("CONTENT_TYPE", t);
    }
    for (k, v) in &headers {
        cgi.env(
            format!("HTTP_{}", k.to_ascii_uppercase().replace('-', "_")),
            v,
        );
    }
    let mut child = cgi.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut output = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut output)
        .unwrap();
    let _ = writer.join();
    let _ = child.wait();
    // CGI headers, a blank line, the body.
    let split = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, skip)) = split else { return };
    let head = String::from_utf8_lossy(&output[..at]).into_owned();
    let mut status = 200;
    let mut response = Vec::new();
    for h in head.lines() {
        if let Some(s) = h.strip_prefix("Status:") {
            status = s
                .trim()
                .split(' ')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(500);
        } else {
            response.extend_from_slice(format!("{h}\r\n").as_bytes());
        }
    }
    log.lock().unwrap().push((method, target, status));
    let _ = out.write_all(format!("HTTP/1.1 {status} X\r\nConnection: close\r\n").as_bytes());
    let _ = out.write_all(&response);
    let _ = out.write_all(b"\r\n");
    let _ = out.write_all(&output[at + skip..]);
}

fn read_body(
    reader: &mut impl BufRead,
    length: &Option<String>,
    encoding: &Option<String>,
) -> Vec<u8> {
    let mut body = Vec::new();
    if encoding
        .as_deref()
        .is_some_and(|e| e.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            if reader.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                let mut end = String::new();
                let _ = reader.read_line(&mut end);
                break;
            }
            let mut chunk = vec![0; n + 2];
            if reader.read_exact(&mut chunk).is_err() {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length.as_deref().and_then(|l| l.parse::<usize>().ok()) {
        body.resize(n, 0);
        let _ = reader.read_exact(&mut body);
    }
    body
}
