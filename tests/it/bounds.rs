//! No request from any key can stall or exhaust the API: what a body can
//! make the server do is bounded before a lock is taken or a row is kept.

use std::time::Duration;

use agentenkit_core::questions::{MAX_ISSUES, MAX_ISSUE_CHARS};
use agentenkit_core::reply::{MAX_EDITED_ARGUMENTS_BYTES, MAX_FREE_FORM_BYTES, MAX_NOTE_CHARS};
use agentenkit_core::KeyScope;
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// A tool whose schema turns every element of `cc` into an issue when it is
/// not a string.
fn strict_registry(url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {CALL_THEN_DONE} ] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }}, cc = {{ type = "array", items = {{ type = "string" }} }} }} }}
"#
    ))
    .expect("test registry")
}

/// A 1 MiB body whose one NUL comes after a 512 KiB key and 250,000 array
/// elements: refused with a 400 naming where, at once (a walk that built
/// the path of every element took minutes of a core).
#[tokio::test]
async fn a_nul_behind_a_long_key_and_a_long_array_is_refused_at_once() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let key = "k".repeat(512 * 1024);
    let zeros = vec!["0"; 250_000].join(",");
    let body = format!(r#"{{"agent":"agent","metadata":{{"{key}":[{zeros},"\u0000"]}}}}"#);
    assert!(body.len() <= 1024 * 1024, "within the body limit");
    let request = env
        .http
        .post(env.url("/threads"))
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .body(body);
    let (status, answer) = tokio::time::timeout(Duration::from_secs(20), env.send(request))
        .await
        .expect("the server answers without walking the body quadratically");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("/250000 contains a NUL"), "{message:.200}");
    assert!(env.rows("SELECT 1 FROM threads", |_| ()).await.is_empty());
    env.finish().await;
}

/// A key that may answer nothing is refused from its headers: its body is
/// never read (here it is not even JSON).
#[tokio::test]
async fn a_key_that_can_answer_nothing_is_refused_before_its_body_is_read() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let (reader, _) = make_key(&env, "alice", &[KeyScope::Read], &[]).await;
    for (path, missing) in [
        ("/agent/tool-call/approve", "respond:approvals"),
        ("/agent/tool-call/reject", "respond:approvals"),
        ("/agent/tool-call/answer", "respond:questions"),
        ("/agent/tool-call/skip", "respond:questions"),
        ("/agent/hitl/respond", "respond:approvals"),
        ("/agent/decisions", "respond:approvals"),
    ] {
        let request = env
            .http
            .post(env.url(path))
            .bearer_auth(&reader)
            .header("content-type", "application/json")
            .body("{ not json");
        let (status, answer) = env.send(request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
        assert_eq!(answer["missingScope"], missing, "{path}: {answer}");
    }
    env.finish().await;
}

/// Edits with a hundred thousand issues: the 422 names the first 20
/// (each cut short) and says there were more; nothing changes; a batch's
/// idempotency record keeps the refused item's status and code only.
#[tokio::test]
async fn edits_with_countless_issues_are_answered_with_the_first_twenty() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(strict_registry(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    // 200 KB of edits, within their bound: a hundred thousand issues.
    let edits = json!({ "to": 7, "cc": vec![0; 100_000] });
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "arguments": edits }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer:.300}");
    assert_eq!(answer["error"], "InvalidArguments");
    let issues = answer["issues"].as_array().unwrap();
    assert_eq!(issues.len(), MAX_ISSUES);
    assert_eq!(answer["moreIssues"], true);
    assert!(issues
        .iter()
        .all(|issue| { issue["message"].as_str().unwrap().chars().count() <= MAX_ISSUE_CHARS }));
    assert!(answer.to_string().len() < 16 * 1024, "a small body");

    // A few issues are all listed, without `moreIssues`.
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1",
                    "arguments": { "to": "a", "cc": [1, 2] } }),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["issues"].as_array().unwrap().len(), 2, "{answer}");
    assert!(answer.get("moreIssues").is_none(), "{answer}");

    // The same edits in a batch with an Idempotency-Key.
    let batch = json!({ "decisions": [{ "action": "approve", "runId": run_id,
        "toolCallId": "c1", "arguments": edits }] });
    let send = || {
        env.http
            .post(env.url("/agent/decisions"))
            .bearer_auth(ALICE)
            .header("Idempotency-Key", "many-issues")
            .json(&batch)
    };
    let (status, first) = env.send(send()).await;
    assert_eq!(status, StatusCode::OK);
    let item = &first["results"][0];
    assert_eq!(item["status"], 422);
    assert_eq!(item["body"]["issues"].as_array().unwrap().len(), MAX_ISSUES);
    let kept: Vec<Value> = env
        .rows(
            "SELECT response FROM idempotency_keys WHERE key LIKE '%many-issues'",
            |row| row.get(0),
        )
        .await;
    assert_eq!(kept.len(), 1);
    let kept_item = &kept[0]["results"][0];
    assert_eq!(kept_item["status"], 422);
    assert_eq!(kept_item["body"]["error"], "InvalidArguments");
    assert!(kept_item["body"].get("issues").is_none(), "{kept_item}");
    let (status, replayed) = env.send(send()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replayed["results"][0]["status"], 422);
    assert_eq!(replayed["results"][0]["body"]["error"], "InvalidArguments");

    // The same past the cap in a batch: the whole request is refused.
    let (status, answer) = env
        .reply(
            "/agent/decisions",
            ALICE,
            json!({ "decisions": [{ "action": "approve", "runId": run_id, "toolCallId": "c1",
                                    "payload": "p".repeat(MAX_FREE_FORM_BYTES) }] }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer:.300}");
    assert_eq!(answer["message"], "payload: at most 262144 bytes of JSON");
    // A thread's metadata past its own cap makes no thread.
    let (status, answer) = env
        .reply(
            "/threads",
            ALICE,
            json!({ "agent": "agent", "metadata": { "k": "m".repeat(64 * 1024) } }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer:.300}");
    assert_eq!(answer["message"], "metadata: at most 65536 bytes of JSON");
    assert_eq!(
        env.rows("SELECT 1 FROM threads", |_| ()).await.len(),
        1,
        "only the first thread"
    );
    assert_eq!(env.wait_pending(&thread_id, 1).await.len(), 1, "still open");
    assert_eq!(tool.calls(), 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Edits that do not fit are refused before the run's lock is taken: a
/// bad edit is answered while something else holds the run, and holds
/// nothing itself. Edits that fit wait for the lock as any answer does.
#[tokio::test]
async fn misfitting_edits_are_refused_without_waiting_for_the_runs_lock() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(strict_registry(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let mut holder = env.pg_client().await;
    let held = holder.transaction().await.unwrap();
    held.execute(
        "SELECT 1 FROM runs WHERE id = $1::text::uuid FOR UPDATE",
        &[&run_id],
    )
    .await
    .unwrap();
    let misfit = json!({ "runId": run_id, "toolCallId": "c1",
                         "arguments": { "to": 7, "cc": vec![0; 10_000] } });
    let (status, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        env.reply("/agent/tool-call/approve", ALICE, misfit),
    )
    .await
    .expect("answered while the run is locked");
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer:.300}");
    assert_eq!(answer["issues"].as_array().unwrap().len(), MAX_ISSUES);
    // Edits that fit wait for the lock, then go through.
    let fitting = json!({ "runId": run_id, "toolCallId": "c1",
                          "arguments": { "to": "b@c.d", "cc": ["e@f.g"] } });
    let (status, answer) = {
        let waiting = env.reply("/agent/tool-call/approve", ALICE, fitting);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut waiting)
                .await
                .is_err(),
            "an answer that fits waits for the run"
        );
        held.rollback().await.unwrap();
        waiting.await
    };
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["delivered"], true);
    env.wait_run_finished(&run_id).await;
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A note, a reason or edits past their bounds are a 400 that changes
/// nothing; a webhook's long rejection payload reaches the model cut.
#[tokio::test]
async fn notes_reasons_and_edits_past_their_bounds_change_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(strict_registry(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let long = "n".repeat(MAX_NOTE_CHARS + 1);
    let big_edits = json!({ "to": "a", "cc": ["x".repeat(MAX_EDITED_ARGUMENTS_BYTES)] });
    for (path, body, field) in [
        (
            "/agent/tool-call/approve",
            json!({ "message": long }),
            "message",
        ),
        (
            "/agent/tool-call/reject",
            json!({ "reason": long }),
            "reason",
        ),
        (
            "/agent/tool-call/approve",
            json!({ "arguments": big_edits }),
            "arguments",
        ),
        (
            "/agent/tool-call/approve",
            json!({ "payload": { "zeros": vec![0; MAX_FREE_FORM_BYTES / 2] } }),
            "payload",
        ),
        (
            "/agent/tool-call/answer",
            json!({ "answers": { "q": ["a".repeat(MAX_FREE_FORM_BYTES)] } }),
            "answers",
        ),
    ] {
        let mut request = json!({ "runId": run_id, "toolCallId": "c1" });
        request
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let (status, answer) = env.reply(path, ALICE, request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer:.300}");
        assert!(
            answer["message"].as_str().unwrap().starts_with(field),
            "{answer:.300}"
        );
    }
    assert_eq!(env.wait_pending(&thread_id, 1).await.len(), 1, "still open");

    // The webhook's form: a rejection whose payload is a long text.
    let (status, answer) = env
        .call(
            "POST",
            "/agent/hitl/respond",
            Some(ALICE),
            Some(
                json!({ "threadId": thread_id, "toolCallId": "c1", "approved": false,
                         "payload": "w".repeat(MAX_NOTE_CHARS * 2) }),
            ),
        )
        .await;
    assert_eq!(
        (status, &answer["delivered"]),
        (StatusCode::OK, &json!(true))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let reason = tool_message(&env, &thread_id).await["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        reason.chars().count(),
        MAX_NOTE_CHARS,
        "cut, with an ellipsis"
    );
    assert_eq!(tool.calls(), 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A POST refused from its headers (its body not yet read) is answered with
/// `Connection: close`, so the client does not send its next request on a
/// connection the server is about to close; a POST whose body was read
/// keeps its connection.
#[tokio::test]
async fn a_post_refused_before_its_body_is_read_says_connection_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let (reader, _) = make_key(&env, "alice", &[KeyScope::Read], &[]).await;
    let addr = env.api;
    let head = |key: &str| {
        format!(
            "POST /agent/tool-call/approve HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: 2\r\n\r\n"
        )
    };
    // The head alone; the body would come later.
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client.write_all(head(&reader).as_bytes()).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut answer))
        .await
        .expect("answered from the headers")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_lowercase();
    assert!(answer.starts_with("http/1.1 403"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");

    // Head and body read (a 400 for `{}`): the connection stays.
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client
        .write_all(format!("{}{{}}", head(ALICE)).as_bytes())
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = client.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_lowercase();
    assert!(answer.starts_with("http/1.1 400"), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
    env.finish().await;
}

/// One model response may make at most `max_tool_calls_per_step` calls:
/// past it each is a failure the model sees, nobody is asked, and the
/// resumed run replays the refusal as it was journaled.
#[tokio::test]
async fn calls_past_the_steps_cap_are_failures_the_model_sees_not_approvals() {
    let tool = ToolServer::ok().await;
    let registry = Registry::from_toml(&format!(
        r#"
max_tool_calls_per_step = 2

[agents.agent]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
    {{ id = "c1", name = "tool", arguments = {{ to = "a" }} }},
    {{ id = "c2", name = "tool", arguments = {{ to = "b" }} }},
    {{ id = "c3", name = "tool", arguments = {{ to = "c" }} }},
  ] }},
  {{ text = "Done." }},
] }}

[tools.tool]
type = "http"
url = "{}"
requires_confirmation = true
input_schema = {{ type = "object", properties = {{ to = {{ type = "string" }} }} }}
"#,
        tool.url
    ))
    .expect("test registry");
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send three").await;
    let pending = env.wait_pending(&thread_id, 2).await;
    let asked: Vec<&str> = pending
        .iter()
        .map(|p| p["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["c1", "c2"]);
    for call in ["c1", "c2"] {
        let (_, answer) = env
            .reply(
                "/agent/tool-call/approve",
                ALICE,
                json!({ "runId": run_id, "toolCallId": call }),
            )
            .await;
        assert_eq!(answer["delivered"], true, "{answer}");
    }
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 2, "the third call never ran");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let third = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["toolCallId"] == "c3")
        .unwrap_or_else(|| panic!("c3's result in {messages}"));
    assert_eq!(third["content"]["error"], "too many tool calls", "{third}");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[test]
fn a_step_cap_of_zero_is_refused_at_load() {
    let refused = Registry::from_toml("max_tool_calls_per_step = 0")
        .err()
        .expect("refused");
    assert!(
        refused.to_string().contains("max_tool_calls_per_step"),
        "{refused}"
    );
}

/// A token of a key's form costs a lookup once: a second try answers from
/// the cache; and made-up tokens hold at most a few of the store's
/// connections, so the API still reaches its database while they wait.
#[tokio::test]
async fn made_up_key_tokens_cannot_take_the_stores_connections() {
    let env = TestEnv::start_with(
        registry(CALL_THEN_DONE, "http://127.0.0.1:9/"),
        |config| {
            config.max_connections = 6;
            config.pool_wait = Duration::from_millis(500);
            config.statement_timeout = Duration::from_secs(4);
        },
        |state| state,
    )
    .await;
    let token = |n: usize| format!("aek_{n:064x}");
    let status = |key: String| {
        let request = env.http.get(env.url("/agents")).bearer_auth(key);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(token(0)).await, 401);
    // The keys' table is locked: a lookup waits for it.
    let locker = env.pg_client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let again = tokio::time::timeout(Duration::from_secs(2), status(token(0))).await;
    assert_eq!(
        again.ok(),
        Some(401),
        "a token found missing is not looked up again"
    );
    let flood: Vec<_> = (1..=12).map(|n| tokio::spawn(status(token(n)))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = env.http.get(env.url("/readyz")).send().await.unwrap();
    assert_eq!(
        ready.status().as_u16(),
        200,
        "the store still has connections"
    );
    locker.batch_execute("ROLLBACK").await.unwrap();
    for request in flood {
        let answered = request.await.unwrap();
        assert!([401, 503].contains(&answered), "{answered}");
    }
    env.finish().await;
}
