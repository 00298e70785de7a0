//! Tools: what a model can call.
//!
//! A [`Tool`] is a Rust value; [`HttpTool`] is the tool of an agent file's
//! `type = "http"`. Arguments are validated against the tool's input schema
//! before anything runs; a mismatch is a tool failure the model sees.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::questions::{first_issues, Issue};
use agentenkit_core::{RunId, ThreadId, ToolCallId};
use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use thiserror::Error;

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Between an MCP server's name and its tool's in a tool's name
/// (`tickets/close_ticket`): no tool of the file or of code has one.
pub const SERVER_SEPARATOR: char = '/';

/// A person's (or an outside system's) answer to a parked call, as the
/// resumed tool sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub approved: bool,
    pub payload: Option<Value>,
}

/// What a tool knows about the call it is executing.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub tool_call_id: ToolCallId,
    pub approval: Option<Approval>,
    /// The reply to the questions the tool asked in its last invocation
    /// (see [`ask_questions`]); `None` on a call's first invocation.
    pub answers: Option<ToolAnswers>,
}

impl ToolContext {
    /// `Some` when the call was parked and answered.
    pub fn approval(&self) -> Option<&Approval> {
        self.approval.as_ref()
    }

    /// `<runId>:<callId>`: the same on every retry of this call, for the
    /// effects a tool makes elsewhere.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.run_id, self.tool_call_id)
    }
}

/// A tool's request to wait for an outside answer (a job on another
/// system): the call parks like an approval, and `respond` resumes it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkRequest {
    /// How a client tells waits apart (`job`, `render`, …).
    pub reason: String,
    /// Shown as the request's `arguments` (e.g. the job id).
    pub payload: Value,
    /// The park's own expiry; the agent's `hitl_ttl_ms` when `None`.
    pub ttl_ms: Option<u64>,
}

/// Returned from `execute` to park the call: the run waits, holding
/// nothing, until `respond(threadId, toolCallId, true, result)`; the same
/// call then runs again with `ctx.approval().payload = result`.
pub fn park_for_input(reason: impl Into<String>, payload: Value, ttl_ms: Option<u64>) -> ToolError {
    ToolError::Park(ParkRequest {
        reason: reason.into(),
        payload,
        ttl_ms,
    })
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum ToolError {
    /// The tool ran and failed: the model sees the message and decides.
    #[error("{0}")]
    Failed(String),
    /// The tool could not run now (its service is down): the step fails and
    /// is retried; after the last attempt the run fails.
    #[error("tool unavailable: {0}")]
    Transient(String),
    /// Wait for an outside answer (see [`park_for_input`]).
    #[error("the tool parks for {}", .0.reason)]
    Park(ParkRequest),
    /// Ask a person questions and be invoked again (see [`ask_questions`]).
    #[error("the tool asks {} question(s)", .0.questions.questions.len())]
    Ask(Box<AskRequest>),
    /// Wait for work that runs elsewhere and be invoked again (see
    /// [`await_work`]).
    #[error("the tool waits for {}", .0.reason)]
    Await(Box<AwaitRequest>),
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;

    /// True when a person must approve each call before it runs.
    fn requires_confirmation(&self) -> bool {
        false
    }

    /// True (the default) when a call a person denied, proposed again with
    /// the same arguments in the same run, is refused without asking them
    /// again; false to ask every time.
    fn refuses_repeated_denials(&self) -> bool {
        true
    }

    /// True when a call changes nothing elsewhere (the file form is
    /// `read_only = true`; an MCP server's `readOnlyHint`): a run that
    /// called only such tools can be rolled back (docs/conversations.md).
    fn read_only(&self) -> bool {
        false
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError>;

    /// Whether the work a call of this tool waits for ([`await_work`]) is
    /// done, by the wait's `payload`: checked from a worker, through
    /// delayed messages, while the run holds nothing. `Ready` (the
    /// default) invokes the tool again.
    async fn poll(&self, _payload: &Value) -> Polled {
        Polled::Ready
    }

    /// The wait of a call of this tool ended without the work (the thread
    /// was stopped): stop the work elsewhere, if it can be.
    async fn abandon(&self, _payload: &Value) {}
}

/// Marks a Rust tool as needing a person's approval before every call
/// (the file form is `requires_confirmation = true`).
pub fn mark_requires_confirmation(tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
    Marked::over(tool, |marks| marks.requires_confirmation = Some(true))
}

/// Marks a tool as changing nothing elsewhere (the file form is
/// `read_only = true`).
pub fn mark_read_only(tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
    Marked::over(tool, |marks| marks.read_only = Some(true))
}

/// Makes a tool ask a person about every call, even one they denied
/// before with the same arguments in the same run (the file form is
/// `refuse_repeated_denials = false`).
pub fn ask_after_every_denial(tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
    Marked::over(tool, |marks| marks.refuses_repeated_denials = Some(false))
}

/// A tool with some of its marks set here; the rest, and everything it
/// does, are its own.
struct Marked {
    tool: Arc<dyn Tool>,
    requires_confirmation: Option<bool>,
    refuses_repeated_denials: Option<bool>,
    read_only: Option<bool>,
}

impl Marked {
    fn over(tool: Arc<dyn Tool>, mark: impl FnOnce(&mut Marked)) -> Arc<dyn Tool> {
        let mut marked = Marked {
            tool,
            requires_confirmation: None,
            refuses_repeated_denials: None,
            read_only: None,
        };
        mark(&mut marked);
        Arc::new(marked)
    }
}

#[async_trait]
impl Tool for Marked {
    fn spec(&self) -> ToolSpec {
        self.tool.spec()
    }

    fn requires_confirmation(&self) -> bool {
        self.requires_confirmation
            .unwrap_or_else(|| self.tool.requires_confirmation())
    }

    fn refuses_repeated_denials(&self) -> bool {
        self.refuses_repeated_denials
            .unwrap_or_else(|| self.tool.refuses_repeated_denials())
    }

    fn read_only(&self) -> bool {
        self.read_only.unwrap_or_else(|| self.tool.read_only())
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        self.tool.execute(arguments, ctx).await
    }

    async fn poll(&self, payload: &Value) -> Polled {
        self.tool.poll(payload).await
    }

    async fn abandon(&self, payload: &Value) {
        self.tool.abandon(payload).await
    }
}

/// A tool with its compiled input schema.
#[derive(Clone)]
pub struct RegisteredTool {
    pub tool: Arc<dyn Tool>,
    pub spec: ToolSpec,
    validator: Arc<jsonschema::Validator>,
}

impl RegisteredTool {
    pub fn new(tool: Arc<dyn Tool>) -> Result<Self, String> {
        let spec = tool.spec();
        // `pattern`s run on the linear-time engine: a schema's pattern meets
        // arguments a model (or whoever steers it) wrote, and a
        // backtracking engine lets a few kilobytes of them burn seconds of
        // CPU per call. Lookaround and backreferences are refused here,
        // when the file (or a server's listing) loads.
        let validator = jsonschema::options()
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(&spec.input_schema)
            .map_err(|e| format!("tool {}: invalid input_schema: {e}", spec.name))?;
        Ok(Self {
            tool,
            spec,
            validator: Arc::new(validator),
        })
    }

    /// The schema issues of `arguments`, empty when they are valid: the
    /// first [`MAX_ISSUES`](agentenkit_core::questions::MAX_ISSUES) + 1
    /// found, each cut to a bounded length, so a
    /// report can say there were more without collecting them all.
    pub fn validate(&self, arguments: &Value) -> Vec<Issue> {
        first_issues(
            self.validator
                .iter_errors(arguments)
                .map(|e| Issue::new(&e.instance_path().to_string(), &e.to_string())),
        )
    }
}

/// A tool served over HTTP: POSTs `{arguments, approval, idempotencyKey}`
/// to `url`; the JSON answer is the result. A 4xx answer (a redirect too:
/// none is followed), an answer over `max_response_bytes` or one that is not
/// JSON is a failure the model sees; a 5xx, a timeout or an unreachable
/// endpoint is transient. Errors name the endpoint without its credentials
/// or query string, which may hold a token.
pub struct HttpTool {
    spec: ToolSpec,
    url: String,
    /// `url` as errors and events may show it.
    shown_url: String,
    requires_confirmation: bool,
    max_response_bytes: u64,
    /// The whole call's deadline, which its client enforces.
    timeout: Duration,
    client: reqwest::Client,
}

/// Defaults of an http tool's limits (SPEC §14).
pub const HTTP_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
pub const HTTP_TOOL_MAX_RESPONSE_BYTES: u64 = 1024 * 1024;
/// How much of a failed answer's body the model is shown.
const ERROR_BODY_CHARS: usize = 512;

/// An http tool's client: a builder that fails is an error, never a
/// default client, which would follow redirects (to a host the agent file
/// never named) and wait for ever.
fn build_client(builder: reqwest::ClientBuilder) -> crate::Result<reqwest::Client> {
    builder
        .build()
        .map_err(|e| crate::Error::Config(format!("http tool client: {e}")))
}

impl HttpTool {
    /// `Error::Config` when its HTTP client cannot be built.
    pub fn new(
        spec: ToolSpec,
        url: impl Into<String>,
        requires_confirmation: bool,
    ) -> crate::Result<Self> {
        let url = url.into();
        Ok(Self {
            spec,
            shown_url: redact_url(&url),
            url,
            requires_confirmation,
            max_response_bytes: HTTP_TOOL_MAX_RESPONSE_BYTES,
            timeout: HTTP_TOOL_TIMEOUT,
            client: Self::client(HTTP_TOOL_TIMEOUT)?,
        })
    }

    /// The whole call (connect, send, read the answer) may take `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> crate::Result<Self> {
        self.client = Self::client(timeout)?;
        self.timeout = timeout;
        Ok(self)
    }

    /// A failed exchange as the model sees it: a timeout says so and names
    /// the deadline (reqwest says only "error sending request").
    fn unavailable(&self, e: reqwest::Error) -> ToolError {
        if e.is_timeout() {
            ToolError::Transient(format!(
                "{}: timed out: no whole answer within {} ms (the tool's timeout_ms)",
                self.shown_url,
                self.timeout.as_millis()
            ))
        } else {
            ToolError::Transient(format!("{}: {}", self.shown_url, e.without_url()))
        }
    }

    /// Answers longer than this are a failure the model sees.
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    fn client(timeout: Duration) -> crate::Result<reqwest::Client> {
        build_client(
            crate::tls::http_client()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none()),
        )
    }

    /// The body, read chunk by chunk and refused past the cap (a declared
    /// `Content-Length` over it is refused before reading).
    async fn read_capped(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ToolError> {
        let cap = self.max_response_bytes;
        let too_large = || {
            ToolError::Failed(format!(
                "{}: the answer is larger than {cap} bytes",
                self.shown_url
            ))
        };
        if response.content_length().is_some_and(|n| n > cap) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unavailable(e))? {
            if body.len() as u64 + chunk.len() as u64 > cap {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// `url` as errors, events and the model may see it: its origin only. User
/// info, path, query and fragment can all carry a secret (webhook URLs put
/// their token in the path).
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) => {
            let origin = parsed.origin().ascii_serialization();
            let more = !parsed.username().is_empty()
                || parsed.password().is_some()
                || parsed.path() != "/"
                || parsed.query().is_some()
                || parsed.fragment().is_some();
            if more {
                format!("{origin}/…")
            } else {
                origin
            }
        }
        Err(_) => "<an invalid url>".into(),
    }
}

#[async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_confirmation(&self) -> bool {
        self.requires_confirmation
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let approval = ctx
            .approval()
            .map(|a| json!({ "approved": a.approved, "payload": a.payload }));
        let body = json!({
            "arguments": arguments,
            "approval": approval,
            "idempotencyKey": ctx.idempotency_key(),
        });
        let response = self
            .client
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| self.unavailable(e))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(ToolError::Transient(format!(
                "{}: HTTP {status}",
                self.shown_url
            )));
        }
        if status.is_redirection() {
            return Err(ToolError::Failed(format!(
                "HTTP {status}: the tool answered with a redirect, which is not followed"
            )));
        }
        let bytes = self.read_capped(response).await?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let shown: String = text.chars().take(ERROR_BODY_CHARS).collect();
            return Err(ToolError::Failed(format!("HTTP {status}: {shown}")));
        }
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ToolError::Failed(format!("the tool answered invalid JSON: {e}")))?;
        match answer.get("park") {
            Some(park) if answer.as_object().is_some_and(|o| o.len() == 1) => {
                Err(parse_park(park)?)
            }
            _ => Ok(answer),
        }
    }
}

/// The tool of an agent file's `type = "echo"`: answers
/// `{"echo": <arguments>}` (and the approval's payload, when there was one)
/// without calling anything, so an agent file can be tried before its
/// services exist.
pub struct EchoTool {
    spec: ToolSpec,
    requires_confirmation: bool,
}

impl EchoTool {
    pub fn new(spec: ToolSpec, requires_confirmation: bool) -> Self {
        Self {
            spec,
            requires_confirmation,
        }
    }
}

#[async_trait]
impl Tool for EchoTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_confirmation(&self) -> bool {
        self.requires_confirmation
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let mut answer = json!({ "echo": arguments });
        if let Some(payload) = ctx.approval().and_then(|a| a.payload.clone()) {
            answer["payload"] = payload;
        }
        Ok(answer)
    }
}

/// The longest wait a park may ask for: the delay ladder's reach (49 days).
pub const MAX_TTL_MS: u64 = agentenkit_queue::ladder::MAX_DELAY_MS;

/// `{"park": {"reason", "payload", "ttlMs"}}` from an http tool.
fn parse_park(park: &Value) -> Result<ToolError, ToolError> {
    let reason = park
        .get("reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ToolError::Failed("a park needs a non-empty string reason".into()))?;
    let ttl_ms = match park.get("ttlMs") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|ms| (1..=MAX_TTL_MS).contains(ms))
                .ok_or_else(|| {
                    ToolError::Failed(format!("ttlMs must be an integer from 1 to {MAX_TTL_MS}"))
                })?,
        ),
    };
    Ok(park_for_input(
        reason,
        park.get("payload").cloned().unwrap_or(Value::Null),
        ttl_ms,
    ))
}

#[cfg(test)]
mod tests;

mod rounds;
pub use rounds::{
    ask_questions, await_work, AskOutcome, AskRequest, AwaitRequest, Polled, ToolAnswers,
    MAX_ASK_ROUNDS, MAX_ASK_STATE_BYTES, MIN_CHECK_INTERVAL_MS, WATCH_FIRST_CHECK_MS,
};
