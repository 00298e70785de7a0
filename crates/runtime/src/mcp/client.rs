//! One MCP server as a process talks to it: a session opened on first use
//! (spawning the stdio child, or initialising over Streamable HTTP), shared
//! by every call, and dropped (the child killed with it) when the server
//! hangs up or stops answering, so the next call starts a new one.

use std::collections::HashMap;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, ElicitationCapability, ErrorCode,
    FormElicitationCapability, InputResponses, ProtocolVersion, RequestMetaObject,
    UrlElicitationCapability, TASKS_EXTENSION_ID,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
    ServiceError,
};
use serde_json::{Map, Value};

use super::def::{DiscoveredTool, ServerDef, Transport};

mod extensions;

/// The `_meta` key of a call's idempotency key (`<runId>:<callId>`): the
/// same on every attempt of one call, so a server can tell a call a
/// crashed worker already sent.
pub const IDEMPOTENCY_KEY: &str = "dev.agentenkit/idempotencyKey";

/// How much of one line a server writes to stderr is logged.
const STDERR_LINE_CHARS: usize = 1024;

/// Why a server could not be used for a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServerError {
    /// It could not be reached, hung up, or did not answer in time: try
    /// again later.
    #[error("{0}")]
    Unreachable(String),
    /// It answered, with an error or something that is not an answer.
    #[error("{0}")]
    Refused(String),
    /// It refused the request's parameters (`-32602`): for `tasks/*`, it
    /// does not know the task (any more).
    #[error("{0}")]
    InvalidParams(String),
}

/// An open session, and the stdio child it talks to (killed when the last
/// holder of the session lets go of it).
struct Session {
    service: RunningService<RoleClient, ClientConfig>,
    /// Of the 2026-07-28 revision (`server/discover`).
    modern: bool,
    _child: Option<tokio::process::Child>,
    /// Set when the server wrote a message longer than its
    /// `max_response_bytes` (stdio): the session ended for that, and the
    /// request that was waiting is refused rather than tried again.
    oversized: Arc<AtomicBool>,
}

/// A server, and its session when one is open.
pub struct Server {
    name: String,
    def: ServerDef,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Counts the `notifications/tools/list_changed` the server sent on
    /// the sessions of this process: whoever serves its tools re-lists.
    tools_changed: Arc<tokio::sync::watch::Sender<u64>>,
    /// Whether a session was opened before the one open now.
    opened_before: AtomicBool,
}

/// Every server this process talks to, by connection: a registry loaded
/// from the file and one built from a pinned version share the session
/// (and the child process) of the same server.
pub fn shared(name: &str, def: &ServerDef) -> Arc<Server> {
    static SERVERS: OnceLock<Mutex<HashMap<String, Arc<Server>>>> = OnceLock::new();
    let key = format!("{name}\n{}\n{}", def.connection(), def.max_response_bytes());
    let mut servers = SERVERS
        .get_or_init(Mutex::default)
        .lock()
        .expect("mcp servers");
    servers
        .entry(key)
        .or_insert_with(|| Arc::new(Server::new(name, def.clone())))
        .clone()
}

impl Server {
    pub fn new(name: &str, def: ServerDef) -> Server {
        Server {
            name: name.to_owned(),
            def,
            session: tokio::sync::Mutex::new(None),
            tools_changed: Arc::new(tokio::sync::watch::Sender::new(0)),
            opened_before: AtomicBool::new(false),
        }
    }

    /// Changes each time the server says its tools changed (on a session
    /// of this process's, while one is open).
    pub fn tools_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tools_changed.subscribe()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every tool the server lists (all pages), within the server's
    /// timeout.
    pub async fn list_tools(&self) -> Result<Vec<DiscoveredTool>, ServerError> {
        let tools = self
            .request("tools/list", |session| async move {
                session.service.list_all_tools().await
            })
            .await?;
        tools.into_iter().map(discovered).collect()
    }

    /// One `tools/call` of `tool` (its name on the server), `idempotency_key`
    /// in its `_meta`, within the server's timeout; `input` answers the
    /// questions its last answer asked (`inputResponses`, `requestState`).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        idempotency_key: &str,
        input: Option<&(InputResponses, Option<String>)>,
    ) -> Result<CallToolResponse, ServerError> {
        let mut meta = Map::new();
        meta.insert(IDEMPOTENCY_KEY.into(), Value::from(idempotency_key));
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        params.meta = Some(RequestMetaObject(rmcp::model::MetaObject(meta)));
        if let Some((responses, state)) = input {
            params.input_responses = Some(responses.clone());
            params.request_state.clone_from(state);
        }
        self.request("tools/call", |session| async move {
            session.service.call_tool_once(params).await
        })
        .await
    }

    /// One request (`method`) on the open session (or a new one), within
    /// the server's timeout.
    async fn request<T, Sent>(
        &self,
        method: &str,
        send: impl FnOnce(Arc<Session>) -> Sent,
    ) -> Result<T, ServerError>
    where
        Sent: std::future::Future<Output = Result<T, ServiceError>>,
    {
        let session = self.session().await?;
        match tokio::time::timeout(self.def.timeout(), send(session.clone())).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.failed(&session, e).await),
            Err(_) => Err(self.timed_out(&session, method).await),
        }
    }

    /// `e` as the caller sees it; a session that failed below the protocol
    /// is closed, so the next request opens another.
    async fn failed(&self, session: &Arc<Session>, e: ServiceError) -> ServerError {
        if session.oversized.load(Ordering::Relaxed) || http_body_too_large(&e) {
            self.close(session).await;
            return self.too_large();
        }
        match e {
            ServiceError::McpError(error) => {
                let message = format!(
                    "mcp server {}: error {}: {}",
                    self.name, error.code.0, error.message
                );
                if error.code == ErrorCode::INVALID_PARAMS {
                    ServerError::InvalidParams(message)
                } else {
                    ServerError::Refused(message)
                }
            }
            ServiceError::UnexpectedResponse => ServerError::Refused(format!(
                "mcp server {}: answered something that is not an answer to the request",
                self.name
            )),
            // Over HTTP the transport ends the session on an answer past
            // its cap as on a hang-up, and does not say which.
            ServiceError::TransportClosed if self.def.transport == Transport::Http => {
                self.close(session).await;
                ServerError::Unreachable(format!(
                    "mcp server {}: the session closed (the server hung up, or answered more than {} bytes, its max_response_bytes)",
                    self.name,
                    self.def.max_response_bytes()
                ))
            }
            other => {
                self.close(session).await;
                ServerError::Unreachable(format!("mcp server {}: {other}", self.name))
            }
        }
    }

    fn too_large(&self) -> ServerError {
        ServerError::Refused(format!(
            "mcp server {}: answered more than {} bytes (the server's max_response_bytes)",
            self.name,
            self.def.max_response_bytes()
        ))
    }

    /// A request that took longer than the timeout: the session may be
    /// stuck (a stdio child that stopped reading), so it is closed.
    async fn timed_out(&self, session: &Arc<Session>, request: &str) -> ServerError {
        self.close(session).await;
        if session.oversized.load(Ordering::Relaxed) {
            return self.too_large();
        }
        ServerError::Unreachable(format!(
            "mcp server {}: {request} timed out: no answer within {} ms (the server's timeout_ms)",
            self.name,
            self.def.timeout().as_millis()
        ))
    }

    /// Forgets `session` if it is still the open one; its child process is
    /// killed when the last call holding it returns.
    async fn close(&self, session: &Arc<Session>) {
        let mut open = self.session.lock().await;
        if open.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *open = None;
            session.service.cancellation_token().cancel();
        }
    }

    /// The open session, or a new one.
    async fn session(&self) -> Result<Arc<Session>, ServerError> {
        let mut open = self.session.lock().await;
        if let Some(session) = open.as_ref().filter(|s| !s.service.is_closed()) {
            return Ok(session.clone());
        }
        let connecting = tokio::time::timeout(self.def.timeout(), self.connect()).await;
        let session = match connecting {
            Ok(result) => Arc::new(result?),
            Err(_) => {
                return Err(ServerError::Unreachable(format!(
                    "mcp server {}: no answer to initialize within {} ms",
                    self.name,
                    self.def.timeout().as_millis()
                )))
            }
        };
        *open = Some(session.clone());
        self.listen(&session);
        // Changes the server made while this process had no session with
        // it went unheard: whoever serves its tools lists them again.
        if self.opened_before.swap(true, Ordering::Relaxed) {
            self.tools_changed.send_modify(|n| *n += 1);
        }
        Ok(session)
    }

    /// A session of the 2026-07-28 revision (`server/discover`), offered
    /// tasks and form and URL elicitation, which such a server asks through `input_required`
    /// and a person answers however long it takes (`elicit.rs`); else, for a
    /// server of an earlier revision, an `initialize` session offered
    /// nothing: its questions would come as requests of its own mid-call,
    /// which nobody could answer while a connection waits. No sampling or
    /// roots either way. (A legacy stdio server is spawned twice: the child
    /// that answered `server/discover` is killed.)
    async fn connect(&self) -> Result<Session, ServerError> {
        let mut modern = ClientConfig::default();
        modern.capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        // Its long work as tasks (SEP-2663), which a worker checks on while
        // the run holds nothing (`tool.rs`).
        modern
            .capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        let discover = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        match self.open(modern, discover).await {
            Err(Startup::Legacy) => {
                let legacy = self.open(ClientConfig::default(), ClientLifecycleMode::Initialize);
                legacy.await.map_err(|startup| match startup {
                    Startup::Failed(e) => e,
                    Startup::Legacy => ServerError::Unreachable(format!(
                        "mcp server {}: initialize was refused",
                        self.name
                    )),
                })
            }
            Err(Startup::Failed(e)) => Err(e),
            Ok(session) => Ok(session),
        }
    }

    /// A session over a new connection (a new child, for stdio), started
    /// as `lifecycle` says, offering what `info` says.
    async fn open(
        &self,
        info: ClientConfig,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Session, Startup> {
        let unreachable = |what: String| {
            Startup::Failed(ServerError::Unreachable(format!(
                "mcp server {}: {what}",
                self.name
            )))
        };
        let cap = usize::try_from(self.def.max_response_bytes()).unwrap_or(usize::MAX);
        match self.def.transport {
            Transport::Stdio => {
                let mut child = self.spawn().map_err(&unreachable)?;
                let stdout = child
                    .stdout
                    .take()
                    .ok_or_else(|| unreachable("no stdout".into()))?;
                let stdin = child
                    .stdin
                    .take()
                    .ok_or_else(|| unreachable("no stdin".into()))?;
                if let Some(stderr) = child.stderr.take() {
                    tokio::spawn(log_stderr(self.name.clone(), stderr));
                }
                let oversized = Arc::new(AtomicBool::new(false));
                let stdout = CappedLines {
                    inner: stdout,
                    line: 0,
                    cap,
                    tripped: oversized.clone(),
                };
                let transport =
                    rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin)
                        .with_max_line_length(cap);
                let modern = matches!(lifecycle, ClientLifecycleMode::Discover { .. });
                self.opened(
                    info.serve_with_lifecycle(transport, lifecycle).await,
                    modern,
                    Some(child),
                    oversized,
                )
            }
            Transport::Http => {
                use rmcp::transport::streamable_http_client::{
                    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
                };
                let url = self.def.url.clone().unwrap_or_default();
                let mut config = StreamableHttpClientTransportConfig::with_uri(url);
                config.max_json_response_size = cap;
                config.max_sse_event_size = cap;
                for (header, variable) in &self.def.headers {
                    let value = std::env::var(variable).map_err(|_| {
                        unreachable(format!("header {header}: {variable} is not set"))
                    })?;
                    let name = reqwest::header::HeaderName::from_bytes(header.as_bytes())
                        .map_err(|e| unreachable(format!("header {header}: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                        unreachable(format!("header {header}: its value is not a header value"))
                    })?;
                    config.custom_headers.insert(name, value);
                }
                let client = crate::tls::http_client()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(self.def.timeout().min(Duration::from_secs(10)))
                    .build()
                    .map_err(|e| unreachable(format!("http client: {e}")))?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let modern = matches!(lifecycle, ClientLifecycleMode::Discover { .. });
                self.opened(
                    info.serve_with_lifecycle(transport, lifecycle).await,
                    modern,
                    None,
                    Arc::default(),
                )
            }
        }
    }

    /// The session `served` opened (its initialize answered), with the
    /// stdio child it talks to.
    fn opened(
        &self,
        served: Result<RunningService<RoleClient, ClientConfig>, ClientInitializeError>,
        modern: bool,
        child: Option<tokio::process::Child>,
        oversized: Arc<AtomicBool>,
    ) -> Result<Session, Startup> {
        let service = served.map_err(|e| match e {
            ClientInitializeError::JsonRpcError(ref error) if is_legacy_refusal(error.code) => {
                Startup::Legacy
            }
            e => Startup::Failed(ServerError::Unreachable(format!(
                "mcp server {}: initialize: {e}",
                self.name
            ))),
        })?;
        Ok(Session {
            service,
            modern,
            _child: child,
            oversized,
        })
    }

    /// The stdio child: its program found on this process's `PATH`, its
    /// environment only the variables the server's `env` names.
    fn spawn(&self) -> Result<tokio::process::Child, String> {
        let command = self.def.command.as_deref().unwrap_or_default();
        let program = find_program(command).ok_or_else(|| format!("{command:?} not found"))?;
        let mut child = tokio::process::Command::new(program);
        child
            .args(&self.def.args)
            .env_clear()
            .envs(
                self.def
                    .env
                    .iter()
                    .filter_map(|name| Some((name, std::env::var_os(name)?))),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        child.spawn().map_err(|e| format!("{command:?}: {e}"))
    }
}

/// A stdio child's output, ended with an error at the first line longer
/// than `cap` (which the transport would otherwise drop without a word,
/// leaving the request it answered to time out).
struct CappedLines<R> {
    inner: R,
    /// Bytes of the current line so far.
    line: usize,
    cap: usize,
    tripped: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CappedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                for &byte in &buf.filled()[before..] {
                    this.line = if byte == b'\n' { 0 } else { this.line + 1 };
                    if this.line > this.cap {
                        this.tripped.store(true, Ordering::Relaxed);
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "a message longer than max_response_bytes",
                        )));
                    }
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// Whether the HTTP transport refused an answer past its byte limit (a
/// session of the 2026-07-28 revision says so; an earlier one hangs up).
fn http_body_too_large(e: &ServiceError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if let Some(StreamableHttpError::<reqwest::Error>::ResponseBodyTooLarge { .. }) =
            error.downcast_ref()
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// How a session failed to start: the server is of an earlier revision
/// (it refused `server/discover` as such a server does), or it failed.
enum Startup {
    Legacy,
    Failed(ServerError),
}

/// Whether a server's error to `server/discover` says it is of an earlier
/// revision: any JSON-RPC error but the ones a 2026-07-28 server refuses a
/// client with (what rmcp's own automatic fallback goes by).
fn is_legacy_refusal(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH
            | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
    )
}

/// `command` as a path to run: as given when it names a directory, else
/// the first match on this process's `PATH` (the child's own environment
/// has no `PATH` unless its `env` passes it on).
fn find_program(command: &str) -> Option<std::path::PathBuf> {
    if command.contains('/') {
        return Some(command.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
}

/// A server's stderr, line by line, into the log (cut: a server may write
/// anything there).
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use futures::StreamExt;
    let codec = tokio_util::codec::LinesCodec::new_with_max_length(STDERR_LINE_CHARS);
    let mut lines = tokio_util::codec::FramedRead::new(stderr, codec);
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => tracing::info!(mcp.server = %server, "stderr: {line}"),
            // A longer line is skipped to its end; the stream goes on.
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                tracing::info!(mcp.server = %server, "stderr: a line over {STDERR_LINE_CHARS} bytes, not shown")
            }
            Err(tokio_util::codec::LinesCodecError::Io(_)) => break,
        }
    }
}

/// A listed tool as a version keeps it.
fn discovered(tool: rmcp::model::Tool) -> Result<DiscoveredTool, ServerError> {
    let annotations = tool
        .annotations
        .as_ref()
        .map(|a| serde_json::to_value(a).and_then(serde_json::from_value))
        .transpose()
        .map_err(|e| ServerError::Refused(format!("tool {}: annotations: {e}", tool.name)))?;
    Ok(DiscoveredTool {
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: Value::Object((*tool.input_schema).clone()),
        annotations,
    })
}
