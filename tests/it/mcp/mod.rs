//! MCP servers as tools, against real servers: the tickets server written
//! for these tests with PyPI's `mcp` (tests/mcp/tickets_server.py), over
//! stdio and Streamable HTTP, and the reference server
//! `@modelcontextprotocol/server-everything` from npm; both installed by
//! scripts/mcp-servers.sh.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agentenkit_runtime::Registry;
use serde_json::Value;

mod approvals;
mod calls;
mod crash;
mod discovery;
mod providers;
mod questions;
mod tasks;
mod versions;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What `scripts/mcp-servers.sh FLAG` prints: a path it installed.
fn installed(flag: &str) -> String {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/mcp-servers.sh"))
        .arg(flag)
        .output()
        .expect("run scripts/mcp-servers.sh");
    assert!(
        out.status.success(),
        "scripts/mcp-servers.sh {flag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The python that has PyPI's `mcp`.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| installed("--python"))
}

/// The tickets server's script.
fn tickets_script() -> String {
    root()
        .join("tests/mcp/tickets_server.py")
        .display()
        .to_string()
}

/// A log file the tickets server appends each call to, and its lines.
struct CallLog(PathBuf);

impl CallLog {
    fn new() -> CallLog {
        CallLog(std::env::temp_dir().join(format!("aek-mcp-{}.log", uuid::Uuid::now_v7())))
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }

    /// The calls that reached the server, in order.
    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    /// The calls of `tool` that reached the server.
    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c["tool"] == tool)
            .collect()
    }
}

impl Drop for CallLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `[mcp.tickets]` over stdio, logging to `log`, with `more` lines in its
/// table.
fn tickets_stdio(log: &CallLog, more: &str) -> String {
    format!(
        "[mcp.tickets]\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{:?}, \"stdio\", {:?}]\n{more}\n",
        python(),
        tickets_script(),
        log.path()
    )
}

/// A file of one agent `agent` naming `tools` with a scripted model
/// answering `script` (TOML), and `servers` (`[mcp.*]` tables).
fn agent_file(tools: &str, script: &str, servers: &str) -> String {
    format!(
        "[agents.agent]\ntools = [{tools}]\nmodel = {{ provider = \"scripted\", script = [{script}] }}\n\n{servers}"
    )
}

async fn load(text: &str) -> Registry {
    Registry::load_toml(text, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The tickets server over Streamable HTTP on a free port, until dropped.
struct HttpTickets {
    child: std::process::Child,
    url: String,
}

impl HttpTickets {
    async fn start(log: &CallLog) -> HttpTickets {
        HttpTickets::start_on(log, free_port()).await
    }

    /// On `port` (one a file named before the server was up).
    async fn start_on(log: &CallLog, port: u16) -> HttpTickets {
        let child = std::process::Command::new(python())
            .args([&tickets_script(), "http", &port.to_string(), &log.path()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the tickets server");
        let url = format!("http://127.0.0.1:{port}/mcp");
        agentenkit_tests::eventually("the tickets server listens", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
        })
        .await;
        HttpTickets { child, url }
    }
}

impl Drop for HttpTickets {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (yet).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The thread's one open request once it is `call`.
async fn waiting_on(env: &agentenkit_tests::TestEnv, thread_id: &str, call: &str) -> Value {
    agentenkit_tests::eventually(&format!("{call} waits"), || async {
        let thread = env.get(&format!("/threads/{thread_id}")).await;
        let pending = thread["pendingInputs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (thread["status"] == "WAITING_FOR_INPUT"
            && pending.len() == 1
            && pending[0]["toolCallId"] == call)
            .then(|| pending[0].clone())
    })
    .await
}
