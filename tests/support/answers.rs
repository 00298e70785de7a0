//! Reading what the API answered (events, journal entries, tool
//! messages), and making keys as `agentenkit keys` does.

use super::*;

/// The first event of type `kind` in a `GET /threads/{id}/events` answer.
pub fn first_event<'a>(events: &'a Value, kind: &str) -> &'a Value {
    events
        .as_array()
        .expect("an array of events")
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {events}"))
}

/// Makes a key of `owner` with `scopes` (its holder in the approver
/// `groups`) as `agentenkit keys create` does; returns the key and its id.
pub async fn make_key(
    env: &TestEnv,
    owner: &str,
    scopes: &[agentenkit_core::KeyScope],
    groups: &[&str],
) -> (String, String) {
    make_held_key(env, owner, scopes, groups, None).await
}

/// Revokes the key `id` (`agentenkit keys revoke`), as an operator does;
/// panics unless a live key was revoked.
pub async fn revoke_key(env: &TestEnv, id: &str) {
    let (said, done) = agentenkit::keys::KeysCommand::Revoke {
        id: id.parse().expect("a key id"),
    }
    .run(&env.store)
    .await
    .expect("keys revoke");
    assert!(done, "{said}");
}

/// [`make_key`] held by `holder` (`keys create --holder`).
pub async fn make_held_key(
    env: &TestEnv,
    owner: &str,
    scopes: &[agentenkit_core::KeyScope],
    groups: &[&str],
    holder: Option<&str>,
) -> (String, String) {
    let (output, done) = agentenkit::keys::KeysCommand::Create {
        owner: owner.into(),
        name: "test".into(),
        scopes: scopes.to_vec(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        holder: holder.map(str::to_owned),
    }
    .run(&env.store)
    .await
    .expect("keys create");
    assert!(done, "{output}");
    let mut lines = output.lines();
    let key = lines.next().expect("the key").to_owned();
    let id = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .expect("the key's id")
        .to_owned();
    (key, id)
}

/// The value of the first entry of `journal` (a run's `GET …/journal`)
/// whose name starts with `prefix`, e.g. `tool:` for a call's decision.
pub fn journal_value<'a>(journal: &'a Value, prefix: &str) -> &'a Value {
    &journal
        .as_array()
        .expect("a journal")
        .iter()
        .find(|entry| {
            entry["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with(prefix)
        })
        .unwrap_or_else(|| panic!("no {prefix} entry in {journal}"))["value"]
}

/// The content of the tool message of call `c1` in `thread_id`: what the
/// model read of its outcome.
pub async fn tool_message(env: &TestEnv, thread_id: &str) -> Value {
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["toolCallId"] == "c1")
        .unwrap_or_else(|| panic!("no tool message in {messages}"))["content"]
        .clone()
}

/// Alice approves call `call` of run `run_id` as it was proposed; the
/// API's answer.
pub async fn approve(env: &TestEnv, run_id: &str, call: &str) -> Value {
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        serde_json::json!({ "runId": run_id, "toolCallId": call }),
    )
    .await
    .1
}
