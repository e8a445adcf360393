//! Output lines, shaped like the real CLI's (see tests/fixtures/claude-2.1.197): each
//! function builds one line of the stream-json protocol, keys in the real order.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::step::{ApiRetry, default_subtype_error};
use crate::usage::{Totals, Usage};

/// A JSON object written key by key, so lines keep the real CLI's key order (`type`
/// first), which serde_json's sorted maps would not.
pub(crate) struct Obj(String);

impl Obj {
    pub(crate) fn new() -> Obj {
        Obj(String::from("{"))
    }

    pub(crate) fn key(&mut self, key: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&Value::from(key).to_string());
        self.0.push(':');
    }

    pub(crate) fn v(mut self, key: &str, value: impl Into<Value>) -> Obj {
        self.key(key);
        self.0.push_str(&value.into().to_string());
        self
    }

    pub(crate) fn raw(mut self, key: &str, json: &str) -> Obj {
        self.key(key);
        self.0.push_str(json);
        self
    }

    pub(crate) fn o(self, key: &str, object: Obj) -> Obj {
        self.raw(key, &object.done())
    }

    pub(crate) fn done(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// What every line of one session shares.
pub(crate) struct LineCtx<'a> {
    pub(crate) session_id: &'a str,
    pub(crate) model: &'a str,
}

pub(crate) fn init_line(
    ctx: &LineCtx,
    init_model: &str,
    cwd: &Path,
    permission_mode: &str,
    uuid: &str,
    scenario: &str,
) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "init")
        .v("cwd", cwd.display().to_string())
        .v("session_id", ctx.session_id)
        .v(
            "tools",
            json!([
                "Task",
                "Bash",
                "Edit",
                "Read",
                "Write",
                "Glob",
                "Grep",
                "TodoWrite"
            ]),
        )
        .v("mcp_servers", json!([]))
        .v("model", init_model)
        .v("permissionMode", permission_mode)
        .v(
            "slash_commands",
            json!(["compact", "context", "init", "review"]),
        )
        .v("apiKeySource", "none")
        .v("claude_code_version", "2.1.197")
        .v("output_style", "default")
        .v("agents", json!(["general-purpose"]))
        .v("skills", json!([]))
        .v("plugins", json!([]))
        .v("uuid", uuid)
        .v("ralph_sim", scenario)
        .done()
}

fn usage_obj(usage: &Usage) -> Obj {
    Obj::new()
        .v("input_tokens", usage.input)
        .v("output_tokens", 1)
        .v("cache_creation_input_tokens", usage.cache_creation)
        .v("cache_read_input_tokens", usage.cache_read)
}

pub(crate) fn text_block(text: &str) -> String {
    Obj::new().v("type", "text").v("text", text).done()
}

pub(crate) fn tool_use_block(id: &str, name: &str, input_json: &str) -> String {
    Obj::new()
        .v("type", "tool_use")
        .v("id", id)
        .v("name", name)
        .raw("input", input_json)
        .done()
}

/// Sub-agent lines say which Task they belong to.
pub(crate) struct SubagentMeta<'a> {
    pub(crate) parent: &'a str,
    pub(crate) subagent_type: &'a str,
    pub(crate) description: &'a str,
}

pub(crate) fn assistant_line(
    ctx: &LineCtx,
    msg_id: &str,
    block: &str,
    usage: &Usage,
    sub: Option<&SubagentMeta>,
    uuid: &str,
) -> String {
    let message = Obj::new()
        .v("id", msg_id)
        .v("type", "message")
        .v("role", "assistant")
        .v("model", ctx.model)
        .raw("content", &format!("[{block}]"))
        .v("stop_reason", Value::Null)
        .v("stop_sequence", Value::Null)
        .o("usage", usage_obj(usage))
        .v("context_management", Value::Null);
    let mut line = Obj::new()
        .v("type", "assistant")
        .o("message", message)
        .v("parent_tool_use_id", sub.map(|s| s.parent))
        .v("session_id", ctx.session_id)
        .v("uuid", uuid);
    if let Some(sub) = sub {
        line = line
            .v("subagent_type", sub.subagent_type)
            .v("task_description", sub.description);
    }
    line.done()
}

/// The message Claude Code makes up when the API call fails (model `<synthetic>`).
pub(crate) fn synthetic_error_line(
    ctx: &LineCtx,
    msg_id: &str,
    text: &str,
    error: &str,
    uuid: &str,
) -> String {
    let usage = Obj::new()
        .v("input_tokens", 0)
        .v("output_tokens", 0)
        .v("cache_creation_input_tokens", 0)
        .v("cache_read_input_tokens", 0)
        .v(
            "server_tool_use",
            json!({"web_search_requests": 0, "web_fetch_requests": 0}),
        )
        .v("service_tier", Value::Null);
    let message = Obj::new()
        .v("id", msg_id)
        .v("container", Value::Null)
        .v("model", "<synthetic>")
        .v("role", "assistant")
        .v("stop_details", Value::Null)
        .v("stop_reason", "stop_sequence")
        .v("stop_sequence", "")
        .v("type", "message")
        .o("usage", usage)
        .raw("content", &format!("[{}]", text_block(text)))
        .v("context_management", Value::Null);
    Obj::new()
        .v("type", "assistant")
        .o("message", message)
        .v("parent_tool_use_id", Value::Null)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("error", error)
        .done()
}

pub(crate) struct ToolOutcome {
    pub(crate) content: Value,
    pub(crate) is_error: Option<bool>,
    pub(crate) tool_use_result: Option<Value>,
}

pub(crate) fn tool_result_line(
    ctx: &LineCtx,
    tool_id: &str,
    outcome: &ToolOutcome,
    parent: Option<&str>,
    uuid: &str,
    timestamp: &str,
) -> String {
    let mut block = Obj::new()
        .v("tool_use_id", tool_id)
        .v("type", "tool_result")
        .v("content", outcome.content.clone());
    if let Some(is_error) = outcome.is_error {
        block = block.v("is_error", is_error);
    }
    let message = Obj::new()
        .v("role", "user")
        .raw("content", &format!("[{}]", block.done()));
    let mut line = Obj::new()
        .v("type", "user")
        .o("message", message)
        .v("parent_tool_use_id", parent)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("timestamp", timestamp);
    if let Some(result) = &outcome.tool_use_result {
        line = line.v("tool_use_result", result.clone());
    }
    line.done()
}

pub(crate) fn user_text_line(
    ctx: &LineCtx,
    text: &str,
    parent: Option<&str>,
    uuid: &str,
    timestamp: &str,
) -> String {
    let message = Obj::new()
        .v("role", "user")
        .raw("content", &format!("[{}]", text_block(text)));
    Obj::new()
        .v("type", "user")
        .o("message", message)
        .v("parent_tool_use_id", parent)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("timestamp", timestamp)
        .done()
}

pub(crate) fn api_retry_line(ctx: &LineCtx, retry: &ApiRetry, uuid: &str) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "api_retry")
        .v("attempt", retry.attempt)
        .v("max_retries", retry.max_retries)
        .v("retry_delay_ms", retry.retry_delay_ms)
        .v("error_status", retry.error_status)
        .v("error", retry_error_name(retry.error_status))
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .done()
}

pub(crate) fn compact_line(
    ctx: &LineCtx,
    trigger: &str,
    pre: u64,
    post: u64,
    uuid: &str,
) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "compact_boundary")
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .o(
            "compact_metadata",
            Obj::new()
                .v("trigger", trigger)
                .v("pre_tokens", pre)
                .v("post_tokens", post),
        )
        .done()
}

pub(crate) fn rate_limit_line(
    ctx: &LineCtx,
    status: &str,
    resets_at: i64,
    limit_type: &str,
    utilization: Option<f64>,
    uuid: &str,
) -> String {
    let mut info = Obj::new()
        .v("status", status)
        .v("resetsAt", resets_at)
        .v("rateLimitType", limit_type);
    if let Some(u) = utilization {
        info = info.v("utilization", u).v("isUsingOverage", false).o(
            "unifiedWindows",
            Obj::new().o(
                limit_type,
                Obj::new().v("utilization", u).v("resetsAt", resets_at),
            ),
        );
    }
    Obj::new()
        .v("type", "rate_limit_event")
        .o("rate_limit_info", info)
        .v("uuid", uuid)
        .v("session_id", ctx.session_id)
        .done()
}

pub(crate) fn task_system_line(
    ctx: &LineCtx,
    subtype: &str,
    task_id: &str,
    tool_use_id: &str,
    description: &str,
    uuid: &str,
) -> String {
    let mut line = Obj::new()
        .v("type", "system")
        .v("subtype", subtype)
        .v("task_id", task_id)
        .v("tool_use_id", tool_use_id);
    line = if subtype == "task_started" {
        line.v("description", description)
    } else {
        line.v("status", "completed").v("summary", description)
    };
    line.v("uuid", uuid).v("session_id", ctx.session_id).done()
}

/// What a result line reports; the numbers come from the session's accounting.
pub(crate) struct ResultSpec {
    pub(crate) subtype: String,
    pub(crate) is_error: bool,
    pub(crate) text: Option<String>,
    pub(crate) api_error_status: Option<u16>,
    pub(crate) errors: Vec<String>,
    pub(crate) permission_denials: Vec<Value>,
    pub(crate) terminal_reason: String,
    pub(crate) stop_reason: &'static str,
    /// Overrides `total_cost_usd` (later results keep counting from it).
    pub(crate) cost_usd: Option<f64>,
    pub(crate) num_turns: Option<u64>,
}

impl ResultSpec {
    /// What the CLI prints when SIGINT aborts a running tool.
    pub(crate) fn aborted() -> ResultSpec {
        ResultSpec {
            subtype: "error_during_execution".into(),
            is_error: true,
            text: None,
            api_error_status: None,
            errors: vec![default_subtype_error("error_during_execution")],
            permission_denials: Vec::new(),
            terminal_reason: "aborted_tools".into(),
            stop_reason: "tool_use",
            cost_usd: None,
            num_turns: None,
        }
    }

    pub(crate) fn success(text: String, cost_usd: Option<f64>) -> ResultSpec {
        ResultSpec {
            subtype: "success".into(),
            is_error: false,
            text: Some(text),
            api_error_status: None,
            errors: Vec::new(),
            permission_denials: Vec::new(),
            terminal_reason: "completed".into(),
            stop_reason: "end_turn",
            cost_usd,
            num_turns: None,
        }
    }
}

pub(crate) struct ResultStats {
    pub(crate) duration_ms: u64,
    pub(crate) num_turns: u64,
    pub(crate) turn: Totals,
    pub(crate) session: Totals,
    pub(crate) cost: f64,
    pub(crate) context_window: u64,
}

pub(crate) fn result_line(
    ctx: &LineCtx,
    spec: &ResultSpec,
    stats: &ResultStats,
    uuid: &str,
) -> String {
    let success = spec.subtype == "success";
    let usage = Obj::new()
        .v("input_tokens", stats.turn.input)
        .v("cache_creation_input_tokens", stats.turn.cache_creation)
        .v("cache_read_input_tokens", stats.turn.cache_read)
        .v("output_tokens", stats.turn.output)
        .v(
            "server_tool_use",
            json!({"web_search_requests": 0, "web_fetch_requests": 0}),
        )
        .v("service_tier", "standard")
        .v(
            "cache_creation",
            json!({"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}),
        )
        .v("inference_geo", "")
        .v("iterations", json!([]))
        .v("speed", "standard");
    // Like the real CLI, no entry until the model has answered at least once.
    let mut model_usage = Obj::new();
    if stats.session.messages > 0 {
        model_usage = model_usage.o(
            ctx.model,
            Obj::new()
                .v("inputTokens", stats.session.input)
                .v("outputTokens", stats.session.output)
                .v("cacheReadInputTokens", stats.session.cache_read)
                .v("cacheCreationInputTokens", stats.session.cache_creation)
                .v("webSearchRequests", 0)
                .v("costUSD", stats.cost)
                .v("contextWindow", stats.context_window)
                .v("maxOutputTokens", 32_000),
        );
    }
    let mut line = Obj::new()
        .v("type", "result")
        .v("subtype", spec.subtype.as_str())
        .v("is_error", spec.is_error);
    if success {
        line = line.v("api_error_status", spec.api_error_status);
    }
    line = line
        .v("duration_ms", stats.duration_ms)
        .v("duration_api_ms", stats.duration_ms * 9 / 10)
        .v("num_turns", stats.num_turns);
    // Error subtypes carry `errors` and no result text.
    if success {
        line = line.v("result", spec.text.clone().unwrap_or_default());
    }
    line = line
        .v("stop_reason", spec.stop_reason)
        .v("session_id", ctx.session_id)
        .v("total_cost_usd", stats.cost)
        .o("usage", usage)
        .o("modelUsage", model_usage)
        .v("permission_denials", spec.permission_denials.clone())
        .v("terminal_reason", spec.terminal_reason.as_str())
        .v("fast_mode_state", "off")
        .v("uuid", uuid);
    if !success || !spec.errors.is_empty() {
        line = line.v("errors", spec.errors.clone());
    }
    line.done()
}

pub(crate) fn timestamp() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

pub(crate) fn epoch_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// "3:45pm" in local time, `secs` from now, as in "You've hit your session limit · resets 3:45pm".
fn local_clock_in(secs: i64) -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_zoned(jiff::tz::TimeZone::system());
    let hour = at.hour();
    let twelve = if hour % 12 == 0 { 12 } else { hour % 12 };
    let half = if hour < 12 { "am" } else { "pm" };
    format!("{twelve}:{:02}{half}", at.minute())
}

pub(crate) fn default_error_text(kind: &str, status: u16, resets_in_secs: i64) -> String {
    match kind {
        "rate_limit" => format!(
            "You've hit your session limit · resets {}",
            local_clock_in(resets_in_secs)
        ),
        "invalid_request" => "Prompt is too long".into(),
        "authentication_failed" => "Invalid API key · Please run /login".into(),
        other => format!("API Error: {status} {other}"),
    }
}

fn retry_error_name(status: u16) -> &'static str {
    match status {
        429 => "rate_limit",
        529 => "overloaded",
        401 => "authentication_failed",
        400 => "invalid_request",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    // Lines copied from fixtures/claude-2.1.197 (the shapes the sim must reproduce).
    const FIXTURE_ASSISTANT: &str = r##"{"type":"assistant","message":{"id":"msg_61950bff2e094d629020","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_ac36c3dad4c1424abc0a","name":"Bash","input":{"command":"cat fix_plan.md","description":"Read the plan"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3200,"output_tokens":1,"cache_creation_input_tokens":18000,"cache_read_input_tokens":0},"context_management":null},"parent_tool_use_id":null,"session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","uuid":"c0ff72c5-5120-4531-b28f-bcc80ca17314"}"##;
    const FIXTURE_TOOL_RESULT: &str = r##"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_ac36c3dad4c1424abc0a","type":"tool_result","content":"# Plan\n- [ ] parser\n- [ ] tests","is_error":false}]},"parent_tool_use_id":null,"session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","uuid":"41154c00-db0d-43b3-a0b8-ef8119b6d07f","timestamp":"2026-11-21T22:18:24.779Z","tool_use_result":{"stdout":"# Plan\n- [ ] parser\n- [ ] tests","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":false}}"##;
    const FIXTURE_RESULT: &str = r##"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":833,"duration_api_ms":236,"ttft_ms":148,"ttft_stream_ms":146,"time_to_request_ms":128,"num_turns":5,"result":"All items are done.\n\n<promise>COMPLETE</promise>","stop_reason":"end_turn","session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","total_cost_usd":0.255075,"usage":{"input_tokens":5700,"cache_creation_input_tokens":26300,"cache_read_input_tokens":459500,"output_tokens":100,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":5700,"outputTokens":100,"cacheReadInputTokens":459500,"cacheCreationInputTokens":26300,"webSearchRequests":0,"costUSD":0.255075,"contextWindow":200000,"maxOutputTokens":32000}},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"845ecbfd-ec9f-426b-9680-ba8e22e525b7"}"##;
    const FIXTURE_ABORT_RESULT: &str = r##"{"type":"result","subtype":"error_during_execution","duration_ms":2454,"duration_api_ms":40,"is_error":true,"num_turns":3,"stop_reason":"tool_use","session_id":"860e2125-9e1d-47d1-bb12-58b52b8e70cb","total_cost_usd":0.0312,"usage":{"input_tokens":1500,"cache_creation_input_tokens":0,"cache_read_input_tokens":88000,"output_tokens":20,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":1500,"outputTokens":20,"cacheReadInputTokens":88000,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.0312,"contextWindow":200000,"maxOutputTokens":32000}},"permission_denials":[],"terminal_reason":"aborted_tools","fast_mode_state":"off","uuid":"6d7f4cd7-7146-46f8-976b-7af66d308a97","errors":["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"]}"##;
    const FIXTURE_RETRY: &str = r##"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":518.8062258992633,"error_status":529,"error":"overloaded","session_id":"a0b79a45-c479-469e-a415-33159b842acc","uuid":"f9b7cbba-5034-4d84-a38d-6a3fea9a995c"}"##;
    const FIXTURE_SYNTHETIC: &str = r##"{"type":"assistant","message":{"id":"ddadfa80-40ed-41ae-8bc2-8e094da75434","container":null,"model":"<synthetic>","role":"assistant","stop_details":null,"stop_reason":"stop_sequence","stop_sequence":"","type":"message","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":null},"content":[{"type":"text","text":"Prompt is too long"}],"context_management":null},"parent_tool_use_id":null,"session_id":"2df9e6d7-1113-4fa7-87ce-460998f5b2d2","uuid":"780ef7e4-fdb4-4918-b974-7ec1a321297e","error":"invalid_request"}"##;

    fn ctx() -> LineCtx<'static> {
        LineCtx {
            session_id: "s-1",
            model: "claude-sonnet-4-5",
        }
    }

    #[test]
    fn assistant_and_tool_result_lines_have_the_fixture_keys() {
        let usage = Usage::from_context(21_200);
        let block = tool_use_block("toolu_1", "Bash", r#"{"command":"ls"}"#);
        let ours: Value =
            serde_json::from_str(&assistant_line(&ctx(), "msg_1", &block, &usage, None, "u"))
                .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_ASSISTANT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(keys(&ours["message"]), keys(&theirs["message"]));
        assert_eq!(
            keys(&ours["message"]["usage"]),
            keys(&theirs["message"]["usage"])
        );
        assert_eq!(
            keys(&ours["message"]["content"][0]),
            keys(&theirs["message"]["content"][0])
        );
        assert_eq!(ours["message"]["model"], "claude-sonnet-4-5");
        assert!(ours["parent_tool_use_id"].is_null());
        // `type` comes first, as in the real CLI.
        assert!(
            assistant_line(&ctx(), "m", &block, &usage, None, "u")
                .starts_with(r#"{"type":"assistant","#)
        );

        let sub = SubagentMeta {
            parent: "toolu_task",
            subagent_type: "general-purpose",
            description: "Find TODOs",
        };
        let line: Value = serde_json::from_str(&assistant_line(
            &ctx(),
            "m",
            &block,
            &usage,
            Some(&sub),
            "u",
        ))
        .unwrap();
        assert_eq!(line["parent_tool_use_id"], "toolu_task");

        let outcome = ToolOutcome {
            content: Value::from("out"),
            is_error: Some(false),
            tool_use_result: Some(
                json!({"stdout": "out", "stderr": "", "interrupted": false, "isImage": false, "noOutputExpected": false}),
            ),
        };
        let ours: Value = serde_json::from_str(&tool_result_line(
            &ctx(),
            "toolu_1",
            &outcome,
            None,
            "u",
            &timestamp(),
        ))
        .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_TOOL_RESULT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(
            keys(&ours["message"]["content"][0]),
            keys(&theirs["message"]["content"][0])
        );
        assert_eq!(
            keys(&ours["tool_use_result"]),
            keys(&theirs["tool_use_result"])
        );

        let ours: Value = serde_json::from_str(&synthetic_error_line(
            &ctx(),
            "m",
            "Prompt is too long",
            "invalid_request",
            "u",
        ))
        .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_SYNTHETIC).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(keys(&ours["message"]), keys(&theirs["message"]));
        assert_eq!(ours["message"]["model"], "<synthetic>");
    }

    #[test]
    fn result_and_system_lines_have_the_fixture_keys() {
        let stats = ResultStats {
            duration_ms: 10,
            num_turns: 5,
            turn: Totals {
                input: 5700,
                output: 100,
                cache_creation: 26300,
                cache_read: 459500,
                messages: 5,
            },
            session: Totals {
                input: 5700,
                output: 100,
                cache_creation: 26300,
                cache_read: 459500,
                messages: 5,
            },
            cost: 0.255075,
            context_window: 200_000,
        };
        let spec = ResultSpec::success("done <promise>COMPLETE</promise>".into(), None);
        let ours: Value = serde_json::from_str(&result_line(&ctx(), &spec, &stats, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_RESULT).unwrap();
        let timing: BTreeSet<String> = ["ttft_ms", "ttft_stream_ms", "time_to_request_ms"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(keys(&ours), &keys(&theirs) - &timing);
        assert_eq!(keys(&ours["usage"]), keys(&theirs["usage"]));
        assert_eq!(ours["modelUsage"], theirs["modelUsage"]);
        assert_eq!(ours["usage"], theirs["usage"]);

        let abort = ResultSpec::aborted();
        let ours: Value = serde_json::from_str(&result_line(&ctx(), &abort, &stats, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_ABORT_RESULT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(ours["errors"], theirs["errors"]);

        let retry = ApiRetry {
            attempt: 1,
            max_retries: 10,
            error_status: 529,
            retry_delay_ms: 500.0,
        };
        let ours: Value = serde_json::from_str(&api_retry_line(&ctx(), &retry, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_RETRY).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(ours["error"], "overloaded");

        let compact: Value =
            serde_json::from_str(&compact_line(&ctx(), "auto", 160_000, 30_000, "u")).unwrap();
        assert_eq!(compact["subtype"], "compact_boundary");
        assert_eq!(
            compact["compact_metadata"],
            json!({"trigger": "auto", "pre_tokens": 160000, "post_tokens": 30000})
        );

        let limit: Value = serde_json::from_str(&rate_limit_line(
            &ctx(),
            "rejected",
            1_800_000_000,
            "five_hour",
            None,
            "u",
        ))
        .unwrap();
        assert_eq!(
            limit["rate_limit_info"],
            json!({"status": "rejected", "resetsAt": 1_800_000_000i64, "rateLimitType": "five_hour"})
        );
    }
}
