//! `agentenkit demo`: a scripted conversation end to end, printed as a
//! transcript. Everything real: Postgres, the queue, the HTTP API, a worker,
//! and an HTTP tool served on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_api::{ApiKeys, AppState};
use agentenkit_runtime::{Agent, HttpTool, Registry, ScriptEntry, ScriptedModel, ToolSpec};
use anyhow::{bail, Context};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::{serve_api, Connections};

const KEY: &str = "demo-key";

pub async fn run(mut connections: Connections) -> anyhow::Result<()> {
    connections.schema = Some(
        connections
            .schema
            .unwrap_or_else(|| "agentenkit_demo".into()),
    );
    connections.queue_prefix = format!("{}-demo", connections.queue_prefix);
    let store = connections.store()?;
    store
        .drop_schema()
        .await
        .context("is Postgres running? try `make services`")?;
    store.migrate().await?;
    let queue = connections.queue(&[]).await?;
    let shutdown = CancellationToken::new();

    let (tool_url, sent) = serve_email_tool(shutdown.clone()).await?;
    let script = vec![
        ScriptEntry {
            text: None,
            tool_calls: vec![agentenkit_core::conversation::ToolCallRequest {
                id: "c1".into(),
                name: "send_email".into(),
                arguments: json!({ "to": "ada@example.com", "subject": "Minutes", "body": "Attached." }),
            }],
            error: None,
        },
        ScriptEntry {
            text: Some("Done: the minutes are on their way to Ada.".into()),
            tool_calls: vec![],
            error: None,
        },
    ];
    let registry = Registry::new()
        .with_tool(Arc::new(HttpTool::new(
            ToolSpec {
                name: "send_email".into(),
                description: "Sends an email".into(),
                input_schema: json!({"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}}),
            },
            tool_url,
            true,
        )?))?
        .with_agent(
            Agent::new("mailer", Arc::new(ScriptedModel::new(script)))
                .system("You send email.")
                .tool("send_email"),
        );
    let registry = Arc::new(registry);
    // One process: the worker and the API share one deployment.
    let deployment = agentenkit_runtime::Deployment::assemble(
        store.clone(),
        agentenkit_runtime::Relay::new(queue.clone()),
        registry,
        agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
    );
    let worker_task = crate::spawn_worker(&deployment, shutdown.clone());
    let state = AppState::new(deployment, ApiKeys::parse(&format!("demo:{KEY}"))?);
    let (addr, _served) = serve_api(state, "127.0.0.1:0".parse()?, shutdown.clone()).await?;

    let result = converse(addr).await;
    shutdown.cancel();
    let _ = worker_task.await;
    queue.close().await;
    println!(
        "\nThe send_email endpoint was called {} time(s).",
        sent.load(Ordering::SeqCst)
    );
    println!(
        "\nTo answer from a browser: `agentenkit dev` serves the inbox page at \
         http://{}/ui/ (sign in with a key from AGENTENKIT_API_KEYS).",
        crate::DEFAULT_LISTEN
    );
    result
}

async fn converse(addr: SocketAddr) -> anyhow::Result<()> {
    let http = agentenkit_runtime::tls::http_client().build()?;
    let base = format!("http://{addr}");
    let call = |req: reqwest::RequestBuilder| async move {
        let response = req.bearer_auth(KEY).send().await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() {
            bail!("{status}: {body}");
        }
        anyhow::Ok(body)
    };
    let thread = call(
        http.post(format!("{base}/threads"))
            .json(&json!({"agent": "mailer"})),
    )
    .await?;
    let thread_id = thread["id"].as_str().context("thread id")?.to_owned();
    println!(
        "POST /threads                 -> thread {thread_id} ({})",
        thread["status"]
    );
    let content = "Send the minutes to Ada.";
    let run = call(
        http.post(format!("{base}/threads/{thread_id}/messages"))
            .json(&json!({"content": content})),
    )
    .await?;
    let run_id = run["runId"].as_str().context("run id")?.to_owned();
    println!("POST /threads/{{id}}/messages   -> run {run_id}");
    let thread = wait_for_status(&http, &base, &thread_id, "WAITING_FOR_INPUT").await?;
    let input = &thread["pendingInputs"][0];
    println!(
        "GET  /threads/{{id}}            -> WAITING_FOR_INPUT: {} wants {}({}), reason {}, expires {}",
        input["runName"], input["toolName"], input["arguments"], input["reason"], input["expiresAt"]
    );
    println!("     (the run is parked: no worker, no lock, no process holds it)");
    let tool_call_id = input["toolCallId"].clone();
    let answer = call(
        http.post(format!("{base}/agent/tool-call/approve"))
            .json(&json!({ "runId": run_id, "toolCallId": tool_call_id })),
    )
    .await?;
    println!("POST /agent/tool-call/approve -> {answer}");
    wait_for_status(&http, &base, &thread_id, "IDLE").await?;
    println!("GET  /threads/{{id}}            -> IDLE");
    println!("\nTranscript:");
    let messages = call(http.get(format!("{base}/threads/{thread_id}/messages"))).await?;
    messages
        .as_array()
        .into_iter()
        .flatten()
        .for_each(print_message);
    let run = call(http.get(format!("{base}/runs/{run_id}"))).await?;
    println!("\nRun {run_id}: {}", run["status"]);
    let journal = call(http.get(format!("{base}/runs/{run_id}/journal"))).await?;
    let names: Vec<&str> = journal
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    println!("Journal: {}", names.join(", "));
    Ok(())
}

/// One message of the transcript, as a line per text or call.
fn print_message(m: &Value) {
    match m["role"].as_str() {
        Some("user") => println!("  user:      {}", m["content"].as_str().unwrap_or_default()),
        Some("assistant") => {
            if let Some(text) = m["content"].as_str() {
                println!("  assistant: {text}");
            }
            for c in m["toolCalls"].as_array().into_iter().flatten() {
                println!(
                    "  assistant: calls {}({})",
                    c["name"].as_str().unwrap_or_default(),
                    c["arguments"]
                );
            }
        }
        Some("tool") => println!(
            "  tool:      {} -> {}",
            m["name"].as_str().unwrap_or_default(),
            m["content"]
        ),
        _ => {}
    }
}

async fn wait_for_status(
    http: &reqwest::Client,
    base: &str,
    thread_id: &str,
    status: &str,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let thread: Value = http
            .get(format!("{base}/threads/{thread_id}"))
            .bearer_auth(KEY)
            .send()
            .await?
            .json()
            .await?;
        if thread["status"] == status {
            return Ok(thread);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the thread did not become {status} in 30 s (is a worker consuming?)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The demo's `send_email` endpoint: counts calls, answers a message id.
async fn serve_email_tool(
    shutdown: CancellationToken,
) -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let app = axum::Router::new().route(
        "/send",
        post(move |Json(body): Json<Value>| {
            let counter = counter.clone();
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                Json(json!({ "sent": true, "messageId": format!("msg-{n}"), "to": body["arguments"]["to"] }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Ok((format!("http://{addr}/send"), sent))
}
