//! A tiny HTTP/1.1 server on 127.0.0.1 that records every request and
//! answers as the test says: a status per request, or never (a channel
//! that hangs). One connection per request (`Connection: close`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Request {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// What to answer the n-th request (0-based): a status, or `None` to hang.
pub type Answer = Box<dyn Fn(usize) -> Option<u16> + Send + Sync>;

pub struct Server {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    pub fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (seen, answer) = (seen.clone(), answer.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    let mut words = line.split_whitespace();
                    let method = words.next().unwrap_or("").to_string();
                    let path = words.next().unwrap_or("").to_string();
                    let mut headers = BTreeMap::new();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                        }
                    }
                    let len: usize = headers
                        .get("content-length")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    let n = {
                        let mut all = seen.lock().unwrap();
                        all.push(Request {
                            method,
                            path,
                            headers,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        all.len() - 1
                    };
                    match answer(n) {
                        Some(status) => {
                            let _ = write!(
                                stream,
                                "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                            );
                        }
                        None => std::thread::sleep(Duration::from_secs(600)),
                    }
                });
            }
        });
        Server { url, requests }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}
