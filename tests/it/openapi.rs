//! The OpenAPI document against the live API: every answer of a real
//! session (approvals, question sets, jobs, sub-agents, the errors of SPEC
//! §9) is documented for its route and status and fits its schema; and a
//! schema-driven fuzzer (schemathesis) finds no 5xx and no answer that
//! breaks the document.

use std::process::Command;

use agentenkit_core::KeyScope;
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// The served document, and a checker of answers against it.
struct Document(Value);

impl Document {
    async fn fetch(env: &TestEnv) -> Document {
        let (status, doc) = env.call("GET", "/openapi.json", None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        Document(doc)
    }

    /// Panics unless `status` is documented for `method template` and
    /// `body` fits the documented JSON schema.
    fn check(&self, method: &str, template: &str, status: StatusCode, body: &Value) {
        let op = &self.0["paths"][template][method.to_ascii_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in the document");
        let response = &op["responses"][status.as_str()];
        assert!(
            response.is_object(),
            "{method} {template} answered {status}, which the document does not list: {body}"
        );
        let schema = &response["content"]["application/json"]["schema"];
        assert!(
            schema.is_object(),
            "{method} {template} {status}: no JSON schema"
        );
        // The response schema with the document's components beside it, so
        // its `#/components/schemas/...` references resolve.
        let root = json!({ "allOf": [schema], "components": self.0["components"] });
        let validator = jsonschema::validator_for(&root).expect("the schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {template} {status} does not fit the document: {errors:?}\n{body:#}"
        );
    }
}

/// Sends a request and checks its answer against the document.
async fn call(
    env: &TestEnv,
    doc: &Document,
    method: &str,
    (template, path): (&str, &str),
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, answer) = env.call(method, path, key, body).await;
    doc.check(method, template, status, &answer);
    (status, answer)
}

const ASK_SET: &str = r#"{ preamble = "Before I start", questions = [
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "Module" }, { value = "repo", label = "Repo" } ], defaults = ["module"] },
] }"#;

fn session_registry(url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.mailer]
description = "Sends email after an approval."
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "Sent." }},
] }}

[agents.scoper]
ask = true
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "q1", name = "ask", arguments = {ASK_SET} }} ] }},
  {{ text = "Scoped." }},
] }}

[agents.boss]
subagents = ["mailer"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "mailer", arguments = {{ task = "mail it" }} }} ] }},
  {{ text = "Delegated." }},
] }}

[tools.send]
type = "http"
url = "{url}"
requires_confirmation = true
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }} }} }}
"#
    ))
    .expect("registry")
}

#[tokio::test]
async fn every_answer_of_a_real_session_fits_the_document() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(session_registry(&tool.url)).await;
    let worker = env.spawn_worker();
    let doc = Document::fetch(&env).await;

    // Probes and the agent list.
    for path in ["/healthz", "/readyz"] {
        call(&env, &doc, "GET", (path, path), None, None).await;
    }
    let (_, agents) = call(&env, &doc, "GET", ("/agents", "/agents"), Some(ALICE), None).await;
    assert_eq!(agents[1]["name"], "mailer");
    assert_eq!(agents[1]["description"], "Sends email after an approval.");
    assert_eq!(agents[2]["ask"], true);
    call(&env, &doc, "GET", ("/agents", "/agents"), None, None).await;

    // An approval, from the thread's start to its journal.
    let threads = ("/threads", "/threads");
    let (status, thread) = call(
        &env,
        &doc,
        "POST",
        threads,
        Some(ALICE),
        Some(json!({ "agent": "mailer", "metadata": { "ticket": 7 } })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let thread_path = format!("/threads/{thread_id}");
    let messages_path = format!("/threads/{thread_id}/messages");
    let messages = ("/threads/{id}/messages", messages_path.as_str());
    let (status, run) = call(
        &env,
        &doc,
        "POST",
        messages,
        Some(ALICE),
        Some(json!({ "content": "mail a@b.c" })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let run_id = run["runId"].as_str().unwrap().to_owned();
    env.wait_pending(&thread_id, 1).await;
    let one_thread = ("/threads/{id}", thread_path.as_str());
    call(&env, &doc, "GET", one_thread, Some(ALICE), None).await;
    let (_, inbox) = call(
        &env,
        &doc,
        "GET",
        ("/agent/inbox", "/agent/inbox"),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(inbox[0]["kind"], "approval");
    // A second turn while one waits: 409.
    let (status, _) = call(
        &env,
        &doc,
        "POST",
        messages,
        Some(ALICE),
        Some(json!({ "content": "again" })),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Answers to an approval: 409.
    let answer = ("/agent/tool-call/answer", "/agent/tool-call/answer");
    let target = json!({ "runId": run_id, "toolCallId": "c1" });
    let mut answers = target.clone();
    answers["answers"] = json!({});
    let (status, _) = call(&env, &doc, "POST", answer, Some(ALICE), Some(answers)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let approve = ("/agent/tool-call/approve", "/agent/tool-call/approve");
    let (_, delivered) = call(
        &env,
        &doc,
        "POST",
        approve,
        Some(ALICE),
        Some(target.clone()),
    )
    .await;
    assert_eq!(delivered["delivered"], true);
    let (_, again) = call(
        &env,
        &doc,
        "POST",
        approve,
        Some(ALICE),
        Some(target.clone()),
    )
    .await;
    assert_eq!(again["delivered"], false);
    env.wait_run_finished(&run_id).await;
    let run_path = format!("/runs/{run_id}");
    call(
        &env,
        &doc,
        "GET",
        ("/runs/{id}", &run_path),
        Some(ALICE),
        None,
    )
    .await;
    let journal_path = format!("/runs/{run_id}/journal");
    let journal = ("/runs/{id}/journal", journal_path.as_str());
    call(&env, &doc, "GET", journal, Some(ALICE), None).await;
    call(&env, &doc, "GET", messages, Some(ALICE), None).await;
    let events_path = format!("/threads/{thread_id}/events?after=0");
    let events = ("/threads/{id}/events", events_path.as_str());
    let (_, listed) = call(&env, &doc, "GET", events, Some(ALICE), None).await;
    assert!(listed.as_array().unwrap().len() > 3);
    let stop_path = format!("/threads/{thread_id}/stop");
    let stop = ("/threads/{id}/stop", stop_path.as_str());
    call(&env, &doc, "POST", stop, Some(ALICE), None).await;

    // Errors: no key, another owner, malformed JSON and ids, unknown agent.
    let (status, _) = call(&env, &doc, "GET", one_thread, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&env, &doc, "GET", one_thread, Some(BOB), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&env, &doc, "GET", journal, Some(BOB), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &env,
        &doc,
        "GET",
        ("/runs/{id}", "/runs/not-a-uuid"),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &env,
        &doc,
        "POST",
        threads,
        Some(ALICE),
        Some(json!({ "agent": "nobody" })),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = call(&env, &doc, "POST", threads, Some(ALICE), Some(json!([1]))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let bad_after = format!("/threads/{thread_id}/events?after=x");
    let (status, _) = call(
        &env,
        &doc,
        "GET",
        ("/threads/{id}/events", &bad_after),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A question set: its card in the inbox, bad answers, then an answer.
    let (thread_id, run_id) = env.start_turn("scoper", "scope it").await;
    env.wait_pending(&thread_id, 1).await;
    let (_, inbox) = call(
        &env,
        &doc,
        "GET",
        ("/agent/inbox", "/agent/inbox"),
        Some(ALICE),
        None,
    )
    .await;
    assert_eq!(inbox[0]["request"]["questions"][0]["id"], "scope");
    let thread_path = format!("/threads/{thread_id}");
    call(
        &env,
        &doc,
        "GET",
        ("/threads/{id}", &thread_path),
        Some(ALICE),
        None,
    )
    .await;
    let target = json!({ "runId": run_id, "toolCallId": "q1" });
    let mut bad = target.clone();
    bad["answers"] = json!({ "scope": ["planet"] });
    let (status, refused) = call(&env, &doc, "POST", answer, Some(ALICE), Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["issues"][0]["path"], "/answers/scope/0");
    let mut good = target.clone();
    good["answers"] = json!({ "scope": ["repo"] });
    let (_, delivered) = call(&env, &doc, "POST", answer, Some(ALICE), Some(good)).await;
    assert_eq!(delivered["delivered"], true);
    let skip = ("/agent/tool-call/skip", "/agent/tool-call/skip");
    let (_, late) = call(&env, &doc, "POST", skip, Some(ALICE), Some(target)).await;
    assert_eq!(late["delivered"], false);
    env.wait_run_finished(&run_id).await;

    // A sub-agent's approval, rejected through the webhook-facing respond.
    let (thread_id, root_run) = env.start_turn("boss", "delegate").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["depth"], 1);
    let respond = ("/agent/hitl/respond", "/agent/hitl/respond");
    let (_, delivered) = call(
        &env,
        &doc,
        "POST",
        respond,
        Some(ALICE),
        Some(json!({ "threadId": thread_id, "toolCallId": "c1", "approved": false, "payload": { "why": "no" } })),
    )
    .await;
    assert_eq!(delivered["delivered"], true);
    env.wait_run_finished(&root_run).await;
    let reject = ("/agent/tool-call/reject", "/agent/tool-call/reject");
    let (status, _) = call(
        &env,
        &doc,
        "POST",
        reject,
        Some(BOB),
        Some(json!({ "runId": root_run, "toolCallId": "c1", "reason": "mine?" })),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(tool.calls(), 1, "only the approved call ran");

    worker.stop().await.unwrap();
    env.finish().await;
}

/// The schemathesis installed by `scripts/schemathesis.sh` (a pinned
/// version in a virtualenv under `target/`; installed on first use).
fn schemathesis() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new("bash")
        .arg(root.join("scripts/schemathesis.sh"))
        .arg("--path")
        .output()
        .expect("run scripts/schemathesis.sh");
    assert!(
        output.status.success(),
        "installing schemathesis failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::path::PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

#[tokio::test]
async fn the_fuzzer_finds_no_server_error_and_no_answer_outside_the_document() {
    let binary = schemathesis();
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(session_registry(&tool.url)).await;
    let worker = env.spawn_worker();
    // Something to find besides 404s: a parked approval of alice's.
    let (thread_id, _) = env.start_turn("mailer", "mail").await;
    env.wait_pending(&thread_id, 1).await;

    let report = std::env::temp_dir().join(format!("agentenkit-fuzz-{}.xml", uuid::Uuid::now_v7()));
    let api = env.url("");
    let output = tokio::task::spawn_blocking(move || {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/schemathesis.toml");
        // Its cache (`.schemathesis/`) goes under target/, not the tree.
        let workdir = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/schemathesis-work");
        std::fs::create_dir_all(workdir).expect("work dir");
        Command::new(binary)
            .current_dir(workdir)
            .args(["--config-file", config])
            .args(["run", &format!("{api}/openapi.json")])
            .args(["--url", &api])
            .args(["-H", &format!("Authorization: Bearer {ALICE}")])
            .args(["--checks", "all"])
            .args(["--max-examples", "40", "--seed", "7"])
            // One worker: hypothesis describes lambdas by parsing source, which
            // is not thread-safe ("AST constructor recursion depth mismatch").
            .args(["--workers", "1"])
            .args(["--request-timeout", "10"])
            .args(["--report", "junit", "--report-junit-path"])
            .arg(&report)
            .env("NO_COLOR", "1")
            .env("SCHEMATHESIS_HOOKS", "")
            .output()
            .expect("run schemathesis")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The summary, for `make test` output and the closing note.
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect();
    println!("{}", summary.join("\n"));
    assert!(
        output.status.success(),
        "schemathesis found failures:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// The document names the deployment's agents only to a caller whose key
/// may read:
/// anyone may read the API's shape, not what a deployment runs.
#[tokio::test]
async fn the_document_names_the_agents_only_to_a_caller_whose_key_may_read() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(session_registry(&tool.url)).await;
    let agent_of =
        |doc: &Value| doc["components"]["schemas"]["CreateThread"]["properties"]["agent"].clone();
    let (status, public) = env.call("GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(agent_of(&public)["enum"].is_null(), "{}", agent_of(&public));
    assert!(
        !public.to_string().contains("scoper"),
        "an agent's name leaked"
    );
    let (status, keyed) = env.call("GET", "/openapi.json", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::OK);
    let names = agent_of(&keyed)["enum"].clone();
    assert!(
        names
            .as_array()
            .is_some_and(|n| n.contains(&json!("scoper"))),
        "{names}"
    );
    // A wrong key is a caller without one, not an error.
    let (status, wrong) = env.call("GET", "/openapi.json", Some("nope"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(agent_of(&wrong)["enum"].is_null());
    // A key that may not read (a job webhook's) learns no more than none.
    let (webhook, _) = make_key(&env, "alice", &[KeyScope::SettleJobs], &[]).await;
    let (status, scoped) = env.call("GET", "/openapi.json", Some(&webhook), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(agent_of(&scoped)["enum"].is_null(), "{}", agent_of(&scoped));
    env.finish().await;
}

/// The document's tool call id schema says what the API accepts: the same
/// ids pass both (a client that validates against the document is never
/// refused for an id, and the fuzzer's valid ids are accepted).
#[test]
fn the_documented_tool_call_id_is_the_one_accepted() {
    let doc = agentenkit_api::openapi_document();
    let schema = doc["components"]["schemas"]["ToolCallIdText"].clone();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let long = "c".repeat(257);
    let wide = "ü".repeat(256);
    for id in [
        "c1",
        "call_abc123",
        "ü-ç",
        wide.as_str(),
        long.as_str(),
        "",
        "c\u{1b}[2K",
        "\u{81}",
        "c\u{202E}1",
        "c\u{2066}",
        "\u{61C}",
        "a\u{200F}",
        "tab\there",
        "ok\u{a0}nbsp",
    ] {
        assert_eq!(
            validator.is_valid(&json!(id)),
            agentenkit_core::ToolCallId::check(id).is_ok(),
            "{id:?}"
        );
    }
}
