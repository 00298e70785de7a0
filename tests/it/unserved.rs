//! Runs whose version names a tool in code (a Rust tool): a worker whose
//! build lacks it hands the step on for one that has it, and a run that no
//! worker serves within the time limit fails, naming the version and the
//! tool. A person's approval is never turned into "unknown tool".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_runtime::tool::{Tool, ToolContext, ToolError, ToolSpec};
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use serde_json::{json, Value};

/// A Rust tool that counts its calls.
struct Lookup(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Lookup {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "lookup".into(),
            description: "Looks a customer up.".into(),
            input_schema: json!({ "type": "object" }),
        }
    }

    async fn execute(&self, _: Value, _: &ToolContext) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!({ "found": true }))
    }
}

/// v1: `agent` calls `lookup`, a tool in code.
fn with_lookup(calls: Arc<AtomicUsize>) -> Registry {
    Registry::from_toml_with_tools(
        r#"
[agents.agent]
system = "v1"
tools = ["lookup"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "l1", name = "lookup", arguments = {} } ] },
  { text = "Found." },
] }
"#,
        vec![Arc::new(Lookup(calls))],
    )
    .expect("v1")
}

/// v2, deployed by a build without `lookup`.
fn without_lookup() -> Registry {
    Registry::from_toml(
        r#"
[agents.agent]
system = "v2"
model = { provider = "scripted", script = [ { text = "v2." } ] }
"#,
    )
    .expect("v2")
}

#[test]
fn a_tool_in_code_is_named_by_the_file_and_never_twice() {
    let calls = Arc::new(AtomicUsize::new(0));
    assert!(with_lookup(calls.clone()).tool("lookup").is_some());
    let twice = Registry::from_toml_with_tools(
        "[agents.a]\nmodel = { provider = \"scripted\", script = [] }\ntools = [\"lookup\"]\n\
         [tools.lookup]\ntype = \"echo\"\n",
        vec![Arc::new(Lookup(calls))],
    );
    let Err(refused) = twice else {
        panic!("a tool defined twice was taken")
    };
    assert!(refused.to_string().contains("in the file and in code"));
}

/// A worker of the build without `lookup` hands the run back untouched; a
/// worker that has it serves it on its version.
#[tokio::test]
async fn a_worker_lacking_a_tool_in_code_hands_the_step_to_one_that_has_it() {
    let calls = Arc::new(AtomicUsize::new(0));
    let env = TestEnv::start(with_lookup(calls.clone())).await;
    let lacking = env.spawn_worker_of(Arc::new(without_lookup()));
    let (_, run_id) = env.start_turn("agent", "find Ada").await;
    eventually("handed back by the worker without lookup", || async {
        let since: Vec<Option<String>> = env
            .rows(
                &format!("SELECT unserved_since::text FROM runs WHERE id = '{run_id}'"),
                |r| r.get(0),
            )
            .await;
        since[0].is_some().then_some(())
    })
    .await;
    assert!(env.journal_names(&run_id).await.is_empty(), "no step ran");
    let having = env.spawn_worker();
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Found.", "v1's script: {run}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let since: Vec<Option<String>> = env
        .rows(
            &format!("SELECT unserved_since::text FROM runs WHERE id = '{run_id}'"),
            |r| r.get(0),
        )
        .await;
    assert_eq!(since, [None], "served: the clock is cleared");
    lacking.stop().await.unwrap();
    having.stop().await.unwrap();
    env.finish().await;
}

/// No worker serves the run within the time limit: it fails, and the
/// error names the version and the missing tool.
#[tokio::test]
async fn a_run_no_worker_serves_fails_naming_its_version_and_tool() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut env = TestEnv::start(with_lookup(calls.clone())).await;
    env.worker_config.unserved_timeout = Duration::from_secs(1);
    env.worker_config.hand_back_delay = Duration::from_millis(100);
    env.worker_config.max_deliveries = 100;
    let version = env
        .registry
        .agent_version("agent")
        .expect("a version")
        .hash
        .clone();
    let lacking = env.spawn_worker_of(Arc::new(without_lookup()));
    let (_, run_id) = env.start_turn("agent", "find Ada").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("no worker served this run"), "{error}");
    assert!(error.contains(&version[..12]), "names the version: {error}");
    assert!(error.contains("\"lookup\""), "names the tool: {error}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    lacking.stop().await.unwrap();
    env.finish().await;
}

/// An agent whose http tool's URL carries a token in its query; `system`
/// tells its versions apart.
fn fetching(system: &str, tool_url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "{system}"
tools = ["fetch"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "f1", name = "fetch", arguments = {{}} }} ] }},
  {{ text = "Fetched." }},
] }}

[tools.fetch]
type = "http"
url = "{tool_url}"
"#
    ))
    .expect("agent file")
}

/// A run pinned to v1, served only by a worker of v2 (a deploy with
/// `serving`'s file): what the run ended as, and the tool's calls.
async fn served_elsewhere(tamper: &str, serving: impl FnOnce(&str) -> Registry) -> (Value, usize) {
    let tool = ToolServer::ok().await;
    let v1_url = format!("{}?token=s3cret", tool.url);
    let mut env = TestEnv::start(fetching("v1", &v1_url)).await;
    env.worker_config.unserved_timeout = Duration::from_secs(1);
    env.worker_config.hand_back_delay = Duration::from_millis(100);
    env.worker_config.max_deliveries = 100;
    let stored = env
        .rows("SELECT definition::text FROM agent_versions", |r| {
            r.get::<_, String>(0)
        })
        .await;
    assert!(!stored.is_empty());
    assert!(
        stored.iter().all(|d| !d.contains("s3cret")),
        "a URL's query is not stored: {stored:?}"
    );
    env.sql(tamper).await;
    let v2 = env.spawn_worker_of(Arc::new(serving(&v1_url)));
    let (_, run_id) = env.start_turn("agent", "fetch it").await;
    let run = env.wait_run_finished(&run_id).await;
    v2.stop().await.unwrap();
    env.finish().await;
    (run, tool.calls())
}

/// A deploy whose file names the same URL, token and all, serves a run of
/// the version stored without the token.
#[tokio::test]
async fn a_stored_version_is_served_with_the_deployments_own_urls() {
    let (run, calls) = served_elsewhere("SELECT 1", |url| fetching("v2", url)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(calls, 1);
}

/// A stored version changed after it was recorded no longer hashes to
/// its version: no worker takes it, and nothing is called.
#[tokio::test]
async fn a_stored_version_that_does_not_hash_to_itself_is_not_served() {
    let (run, calls) = served_elsewhere(
        "UPDATE agent_versions
         SET definition = jsonb_set(definition, '{agents,agent,system}', '\"v1, edited\"')
         WHERE definition->'agents'->'agent'->>'system' = 'v1'",
        |url| fetching("v2", url),
    )
    .await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("does not hash to its version"), "{error}");
    assert_eq!(calls, 0);
}

/// A version that sends where this deployment's file does not is not
/// served by it, whatever the row says: the run fails naming the setting.
#[tokio::test]
async fn a_stored_version_sending_where_the_deployment_does_not_is_not_served() {
    let (run, calls) =
        served_elsewhere("SELECT 1", |_| fetching("v2", "http://127.0.0.1:9/other")).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("its url")
            && error.contains("is not one this deployment's agent file names"),
        "{error}"
    );
    assert_eq!(calls, 0);
}
