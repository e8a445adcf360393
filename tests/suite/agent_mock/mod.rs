//! Mocks of the model APIs behind opencode (an OpenAI-compatible provider:
//! `POST /v1/chat/completions`, server-sent events) and Gemini CLI (the
//! Gemini API: `POST /v1beta/models/M:streamGenerateContent?alt=sse`), on
//! 127.0.0.1, for the real CLIs run by ralph (tests/real_opencode.rs,
//! tests/real_gemini.rs).
//!
//! `server` is the HTTP plumbing (one thread per connection, keep-alive,
//! every request recorded and logged); `openai` and `gemini` read a
//! request into the provider-neutral [`Request`] view the test's script
//! sees and render its [`Reply`] in the provider's wire format: text, tool
//! calls, usage figures, an API error, a usage limit in the provider's own
//! words.
#![allow(dead_code, unused_imports)] // each test file uses its own provider

pub mod cases;
pub mod cli;
pub mod gemini;
pub mod openai;
pub mod server;

use std::time::Duration;

use serde_json::Value;

pub use server::{MockServer, Request};

/// The script's answer to one main-conversation request.
#[derive(Debug, Clone)]
pub enum Reply {
    Turn {
        text: Vec<String>,
        /// `(tool name, arguments)` in the CLI's own tool vocabulary.
        tools: Vec<(String, Value)>,
        /// Prompt tokens the turn reports (what fills the context window).
        prompt_tokens: u64,
        /// Held back this long before answering (a slow model).
        delay: Duration,
    },
    /// An HTTP error with the provider's JSON error body (and headers).
    Error {
        status: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
}

impl Reply {
    pub fn turn(prompt_tokens: u64) -> Reply {
        Reply::Turn {
            text: Vec::new(),
            tools: Vec::new(),
            prompt_tokens,
            delay: Duration::ZERO,
        }
    }

    pub fn text(mut self, t: &str) -> Reply {
        if let Reply::Turn { text, .. } = &mut self {
            text.push(t.to_string());
        }
        self
    }

    pub fn tool(mut self, name: &str, args: Value) -> Reply {
        if let Reply::Turn { tools, .. } = &mut self {
            tools.push((name.to_string(), args));
        }
        self
    }

    pub fn delay(mut self, d: Duration) -> Reply {
        if let Reply::Turn { delay, .. } = &mut self {
            *delay = d;
        }
        self
    }
}
