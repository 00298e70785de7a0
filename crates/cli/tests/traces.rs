//! One trace per run, across processes (issue 39): an API, two workers and
//! a reaper, each its own process exporting OTLP over HTTP to a receiver
//! in this test, run an approval cycle with a sub-agent; then the same
//! processes without the `OTEL_*` variables export and carry nothing.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::{Child, Command};

#[path = "traces/bounded.rs"]
mod bounded;
#[path = "traces/otlp.rs"]
mod otlp;
use otlp::{waterfall, Receiver, Span};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const KEY: &str = "key-a";

/// The caller's span: the trace the run joins.
const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
/// The webhook handler's span that answers: another trace, linked.
const ANSWERER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const ANSWERER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// The lead notes something (a function tool, run at once and replayed by
/// every later segment) and delegates to the helper, whose email needs an
/// approval; then the lead asks to confirm, which nobody answers: it
/// expires (4 s).
const AGENTS: &str = r#"
[agents.lead]
system = "You lead."
hitl_ttl_ms = 4000
tools = ["confirm", "note"]
subagents = ["helper"]
model = { provider = "scripted", script = [
  { tool_calls = [
    { id = "n1", name = "note", arguments = { text = "delegating" } },
    { id = "d1", name = "helper", arguments = { task = "send the mail" } },
  ] },
  { tool_calls = [ { id = "c2", name = "confirm", arguments = { what = "all sent?" } } ] },
  { text = "All done." },
] }

[agents.helper]
system = "You send mail."
tools = ["send_email"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "send_email", arguments = { to = "a@b.c" } } ] },
  { text = "Sent." },
] }

[tools.send_email]
type = "echo"
requires_confirmation = true
input_schema = { type = "object", required = ["to"], properties = { to = { type = "string" } } }

[tools.confirm]
type = "echo"
requires_confirmation = true
input_schema = { type = "object" }

[tools.note]
type = "echo"
input_schema = { type = "object" }
"#;

/// Where everything of this test lives: a schema, a queue prefix, a folder.
struct Deployment {
    schema: String,
    prefix: String,
    dir: std::path::PathBuf,
    agents: std::path::PathBuf,
    api_port: u16,
}

impl Deployment {
    async fn new() -> Self {
        let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
        let mut config = agentenkit_store::StoreConfig::new(database_url());
        config.schema = Some(schema.clone());
        agentenkit_store::Store::connect(&config)
            .unwrap()
            .migrate()
            .await
            .unwrap();
        let prefix = format!("traces.{}", uuid::Uuid::now_v7().simple());
        let dir = std::env::temp_dir().join(format!("agentenkit-{prefix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let agents = dir.join("agentenkit.toml");
        std::fs::write(&agents, AGENTS).unwrap();
        let api_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            schema,
            prefix,
            dir,
            agents,
            api_port,
        }
    }

    /// `binary` with this deployment's settings and `otel`'s variables
    /// (none: the variables unset).
    fn start(&self, binary: &str, name: &str, otel: &[(&str, String)], args: &[&str]) -> Child {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut command = Command::new(binary);
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
            command.env_remove(key);
        }
        command
            .args(args)
            .env("DATABASE_URL", database_url())
            .env("AGENTENKIT_SCHEMA", &self.schema)
            .env("AMQP_URL", AMQP)
            .env("AGENTENKIT_QUEUE_PREFIX", &self.prefix)
            .env("AGENTENKIT_CONFIG", &self.agents)
            .env("AGENTENKIT_API_KEYS", format!("alice:{KEY}"))
            .env("AGENTENKIT_LISTEN", format!("127.0.0.1:{}", self.api_port))
            .env("RUST_LOG", "info,lapin=off")
            .envs(otel.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    async fn finish(self) {
        let registry = agentenkit_runtime::Registry::from_file(&self.agents).unwrap();
        let topology = agentenkit_queue::Topology {
            prefix: self.prefix.clone(),
            delay_lanes: registry.delay_lanes(),
            ..agentenkit_queue::Topology::default()
        };
        let _ = agentenkit::broker::delete_topology(AMQP, &topology).await;
        let mut config = agentenkit_store::StoreConfig::new(database_url());
        config.schema = Some(self.schema.clone());
        let store = agentenkit_store::Store::connect(&config).unwrap();
        store.drop_schema().await.unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGTERM, then the exit: a process flushes its spans as it stops.
async fn stop(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    let exited = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
    assert!(exited.is_ok(), "a process did not stop on SIGTERM");
}

struct Client {
    http: reqwest::Client,
}

impl Client {
    async fn call(&self, url: String, body: Option<Value>, traceparent: Option<&str>) -> Value {
        let mut request = match &body {
            Some(body) => self.http.post(url).json(body),
            None => self.http.get(url),
        };
        request = request.bearer_auth(KEY);
        if let Some(parent) = traceparent {
            request = request.header("traceparent", parent);
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{status}: {body}");
        body
    }

    /// Polls `GET path` until `done` holds (30 s at most).
    async fn until(&self, d: &Deployment, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(answer) = self.http.get(d.url(path)).bearer_auth(KEY).send().await {
                if let Ok(body) = answer.json::<Value>().await {
                    if done(&body) {
                        return body;
                    }
                }
            }
            assert!(Instant::now() < deadline, "{path} never got there");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn pending(thread: &Value, tool: &str) -> bool {
    thread["pendingInputs"]
        .as_array()
        .is_some_and(|p| p.iter().any(|i| i["toolName"] == tool))
}

#[tokio::test]
async fn a_run_is_one_trace_across_the_api_two_workers_and_the_reaper() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    receiver.clone().serve(listener).await;
    let d = Deployment::new().await;
    let otel = |service: Option<&str>| {
        let mut vars = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200".to_owned()),
        ];
        if let Some(service) = service {
            vars.push(("OTEL_SERVICE_NAME", service.to_owned()));
        }
        vars
    };
    let api = d.start(
        env!("CARGO_BIN_EXE_agentenkit-api"),
        "api",
        &otel(None),
        &[],
    );
    let worker = env!("CARGO_BIN_EXE_agentenkit-worker");
    let workers = [
        d.start(worker, "worker-1", &otel(Some("worker-1")), &[]),
        d.start(worker, "worker-2", &otel(Some("worker-2")), &[]),
    ];
    let reaper = d.start(
        env!("CARGO_BIN_EXE_agentenkit-reaper"),
        "reaper",
        &otel(None),
        &["--every", "300ms"],
    );
    let client = Client {
        http: agentenkit_runtime::tls::http_client().build().unwrap(),
    };
    client.until(&d, "/readyz", |b| b["broker"] == "up").await;

    // The caller's span starts the run.
    let thread = client
        .call(d.url("/threads"), Some(json!({ "agent": "lead" })), None)
        .await;
    let thread_path = format!("/threads/{}", thread["id"].as_str().unwrap());
    let started = client
        .call(
            d.url(&format!("{thread_path}/messages")),
            Some(json!({ "content": "go" })),
            Some(CALLER),
        )
        .await;
    let root_run = started["runId"].as_str().unwrap().to_owned();

    // The helper's email waits for a person, who answers 1.5 s later from
    // a trace of their own.
    let waiting = client
        .until(&d, &thread_path, |t| pending(t, "send_email"))
        .await;
    let parked_seen = Instant::now();
    let request = waiting["pendingInputs"][0].clone();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answered = client
        .call(
            d.url("/agent/tool-call/approve"),
            Some(json!({ "runId": request["runId"], "toolCallId": "c1" })),
            Some(ANSWERER),
        )
        .await;
    assert_eq!(answered["delivered"], true, "{answered}");
    let open_for = parked_seen.elapsed().as_secs_f64();

    // The lead's confirmation waits 3 s for nobody: the workers stop, and
    // the reaper expires it; a worker started again finishes the run.
    client
        .until(&d, &thread_path, |t| pending(t, "confirm"))
        .await;
    // Both at once: the confirmation must outlast no worker's shutdown.
    let [one, two] = workers;
    tokio::join!(stop(one), stop(two));
    // Expired with no worker up: the resume waits in the queue.
    client
        .until(&d, &format!("/runs/{root_run}"), |r| {
            r["status"] == "queued"
        })
        .await;
    let last = d.start(worker, "worker-1-again", &otel(Some("worker-1")), &[]);
    client
        .until(&d, &format!("/runs/{root_run}"), |r| {
            r["status"] == "completed"
        })
        .await;
    for process in [last, reaper, api] {
        stop(process).await;
    }

    let spans = receiver.spans();
    let run: Vec<&Span> = spans
        .iter()
        .filter(|s| s.trace_id == CALLER_TRACE)
        .collect();
    let by_id: HashMap<&str, &Span> = run.iter().map(|s| (s.span_id.as_str(), *s)).collect();
    let services: HashSet<&str> = run.iter().map(|s| s.service.as_str()).collect();
    let names = |name: &str| {
        run.iter()
            .filter(|s| s.name == name)
            .copied()
            .collect::<Vec<_>>()
    };
    let dump = || {
        run.iter()
            .map(|s| {
                format!(
                    "{} {} {} <- {} {:?}",
                    s.service, s.name, s.span_id, s.parent, s.attributes
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    // The picture of docs/observability.md's "Traces" section (`--no-capture`).
    println!("{}", waterfall(&run));

    // One trace: every process's part of the run is in the caller's trace.
    for service in ["agentenkit-api", "agentenkit-reaper"] {
        assert!(
            services.contains(service),
            "no {service} span in the run's trace:\n{}",
            dump()
        );
    }
    assert!(
        services.contains("worker-1") || services.contains("worker-2"),
        "no worker span in the run's trace:\n{}",
        dump()
    );
    let segments = names("segment");
    let runs: HashSet<&str> = segments.iter().filter_map(|s| s.attr("run_id")).collect();
    assert_eq!(
        runs.len(),
        2,
        "the lead's and the helper's segments:\n{}",
        dump()
    );
    assert!(
        segments.len() >= 5,
        "3 segments of the lead, 2 of the helper:\n{}",
        dump()
    );

    // Parent links across the broker: each segment's parent is a span
    // exported by some process, and some are in another process.
    let mut across = 0;
    for segment in &segments {
        let parent = by_id
            .get(segment.parent.as_str())
            .unwrap_or_else(|| panic!("segment {segment:?} has no exported parent:\n{}", dump()));
        across += usize::from(parent.service != segment.service);
    }
    assert!(
        across >= 2,
        "the API starts and resumes segments of workers:\n{}",
        dump()
    );
    // The request that started the run is named by its route.
    let started_by = run
        .iter()
        .find(|s| s.parent == "b7ad6b7169203331")
        .unwrap_or_else(|| panic!("no span under the caller's:\n{}", dump()));
    assert_eq!(started_by.name, "POST /threads/{id}/messages");
    assert_eq!(
        started_by.attr("http.route"),
        Some("/threads/{id}/messages")
    );
    assert_eq!(started_by.attr("http.response.status_code"), Some("202"));
    // The answer continues the run's trace and links the answerer's span.
    let answer = names("answer");
    assert_eq!(answer.len(), 1, "{}", dump());
    assert_eq!(answer[0].service, "agentenkit-api");
    // The link: the answering request's span, in the answerer's trace.
    let request = spans
        .iter()
        .find(|s| answer[0].links.contains(&s.span_id))
        .unwrap_or_else(|| panic!("the answer links no exported span: {answer:?}"));
    assert_eq!(request.trace_id, ANSWERER_TRACE, "{request:?}");
    assert_eq!(request.parent, "00f067aa0ba902b7", "{request:?}");
    assert_eq!(answer[0].attr("answer.outcome"), Some("approved"));
    let helper_resumed = segments
        .iter()
        .filter(|s| {
            s.parent == answer[0].span_id
                || by_id
                    .get(s.parent.as_str())
                    .is_some_and(|p| p.parent == answer[0].span_id)
        })
        .count();
    assert_eq!(
        helper_resumed,
        1,
        "the resume is the answer's child:\n{}",
        dump()
    );
    // A sub-agent's run is a child of the delegating call.
    let delegation = names("tool")
        .into_iter()
        .find(|s| s.attr("tool_call_id") == Some("d1"))
        .unwrap_or_else(|| panic!("no span of the delegating call:\n{}", dump()));
    let helper_run = segments
        .iter()
        .find(|s| s.parent == delegation.span_id)
        .unwrap_or_else(|| panic!("no segment under the delegation:\n{}", dump()));
    assert_ne!(helper_run.attr("run_id"), Some(root_run.as_str()));

    // The waits: the person's as long as the request was open here, with
    // who answered and how; the confirmation's, expired by the reaper.
    let waits = names("wait");
    let approved = waits
        .iter()
        .find(|w| w.attr("answer.outcome") == Some("approved"))
        .unwrap_or_else(|| panic!("no approved wait:\n{}", dump()));
    assert_eq!(approved.attr("answer.by"), Some("alice"));
    assert!(
        // The span ends when the answer reads the row; the test's clock
        // also runs through the commit and the HTTP answer.
        approved.seconds() >= open_for - 0.5 && approved.seconds() <= open_for + 2.0,
        "the wait lasted {} s; the request was open {open_for} s here",
        approved.seconds()
    );
    let expired = waits
        .iter()
        .find(|w| w.attr("answer.outcome") == Some("expired"))
        .unwrap_or_else(|| panic!("no expired wait:\n{}", dump()));
    assert_eq!(expired.service, "agentenkit-reaper");
    assert!(
        expired.seconds() >= 3.9,
        "a 4 s wait lasted {} s",
        expired.seconds()
    );

    // Model calls by the GenAI conventions, each made once: replays are
    // marked on their segment, never exported as new calls.
    let chats: Vec<&Span> = run
        .iter()
        .filter(|s| s.attr("gen_ai.operation.name").is_some())
        .copied()
        .collect();
    for chat in &chats {
        assert_eq!(chat.name, "chat scripted");
        assert_eq!(chat.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.attr("gen_ai.system"), Some("scripted"));
        assert_eq!(chat.attr("gen_ai.request.model"), Some("scripted"));
        assert!(
            chat.attr("gen_ai.usage.input_tokens")
                .is_some_and(|n| n != "0"),
            "{chat:?}"
        );
        assert!(
            chat.attr("gen_ai.usage.output_tokens").is_some(),
            "{chat:?}"
        );
    }
    let calls: HashSet<(String, String)> = chats
        .iter()
        .map(|chat| {
            let mut up = by_id.get(chat.parent.as_str()).copied();
            while let Some(span) = up.filter(|s| s.name != "segment") {
                up = by_id.get(span.parent.as_str()).copied();
            }
            let run = up.and_then(|s| s.attr("run_id")).unwrap_or("?").to_owned();
            (run, chat.attr("model_call").unwrap_or("?").to_owned())
        })
        .collect();
    assert_eq!(
        chats.len(),
        5,
        "3 calls of the lead and 2 of the helper:\n{}",
        dump()
    );
    assert_eq!(calls.len(), 5, "no call exported twice: {calls:?}");
    assert!(
        segments
            .iter()
            .any(|s| s.attr("replayed_steps").is_some_and(|n| n != "0")),
        "a resumed segment says what it replayed:\n{}",
        dump()
    );
    // Each commit is a span: one transaction, saying what it ended.
    let commits = names("commit");
    let ended = |what: &str| {
        commits
            .iter()
            .filter(|c| c.attr("ends") == Some(what))
            .count()
    };
    assert!(
        commits
            .iter()
            .all(|c| c.attr("db.transactions") == Some("1")),
        "{commits:?}"
    );
    assert_eq!(
        (ended("park"), ended("finish")),
        (3, 2),
        "lead 2 parks 1 finish, helper 1 and 1"
    );
    // A tool run once is one span, however often its run replays it.
    let mut runs_of_tools: HashMap<&str, usize> = HashMap::new();
    for tool in names("tool") {
        *runs_of_tools
            .entry(tool.attr("tool_call_id").unwrap_or("?"))
            .or_default() += 1;
    }
    assert_eq!(runs_of_tools.get("n1"), Some(&1), "{runs_of_tools:?}");
    assert!(runs_of_tools.values().all(|&n| n == 1), "{runs_of_tools:?}");
    // Tool calls name their outcome and idempotency key.
    let sent = names("tool")
        .into_iter()
        .find(|s| s.attr("tool_call_id") == Some("c1"))
        .unwrap_or_else(|| panic!("no span of the approved call:\n{}", dump()));
    assert_eq!(sent.attr("outcome"), Some("executed"));
    assert!(sent
        .attr("idempotency_key")
        .is_some_and(|k| k.ends_with(":c1")));

    // The same deployment without the variables: nothing exported, nothing
    // carried (the run keeps no trace).
    let exports = *receiver.requests.lock().unwrap();
    let api = d.start(env!("CARGO_BIN_EXE_agentenkit-api"), "api-off", &[], &[]);
    let worker = d.start(
        env!("CARGO_BIN_EXE_agentenkit-worker"),
        "worker-off",
        &[],
        &[],
    );
    client.until(&d, "/readyz", |b| b["broker"] == "up").await;
    let thread = client
        .call(d.url("/threads"), Some(json!({ "agent": "helper" })), None)
        .await;
    let path = format!("/threads/{}", thread["id"].as_str().unwrap());
    let started = client
        .call(
            d.url(&format!("{path}/messages")),
            Some(json!({ "content": "go" })),
            Some(CALLER),
        )
        .await;
    client.until(&d, &path, |t| pending(t, "send_email")).await;
    for process in [worker, api] {
        stop(process).await;
    }
    assert_eq!(
        *receiver.requests.lock().unwrap(),
        exports,
        "exported with the variables unset"
    );
    let (db, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let kept = db
        .query_one(
            &format!("SELECT traceparent FROM {}.runs WHERE id = $1", d.schema),
            &[&started["runId"]
                .as_str()
                .unwrap()
                .parse::<uuid::Uuid>()
                .unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(
        kept.get::<_, Option<String>>(0),
        None,
        "a trace kept with the variables unset"
    );
    d.finish().await;
}
