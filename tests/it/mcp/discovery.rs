//! What a process lists from a server at start: tools with their schemas
//! and annotations, in each agent's version; approvals from annotations.

use agentenkit_tests::*;
use serde_json::json;

use super::*;

#[tokio::test]
async fn a_servers_tools_are_listed_into_the_version_and_annotations_decide_who_asks() {
    let log = CallLog::new();
    let text = agent_file(
        "\"tickets/*\"",
        "",
        &tickets_stdio(&log, "require_approval = { flaky = \"always\" }"),
    );
    let registry = load(&text).await;
    assert!(registry.delayed_agents().is_empty());
    let agent = registry.agent("agent").unwrap();
    for tool in [
        "search_tickets",
        "close_ticket",
        "create_ticket",
        "flaky",
        "hang",
    ] {
        assert!(
            agent.tools.contains(&format!("tickets/{tool}")),
            "tickets/* names {tool}: {:?}",
            agent.tools
        );
    }
    let asks = |tool: &str| {
        registry
            .tool(&format!("tickets/{tool}"))
            .unwrap_or_else(|| panic!("tickets/{tool} registered"))
            .tool
            .requires_confirmation()
    };
    assert!(!asks("search_tickets"), "read-only runs without asking");
    assert!(asks("close_ticket"), "destructive asks");
    assert!(asks("create_ticket"), "unannotated asks (failing closed)");
    assert!(asks("flaky"), "the table overrides the annotations");
    let spec = &registry.tool("tickets/search_tickets").unwrap().spec;
    assert_eq!(spec.input_schema["properties"]["query"]["type"], "string");
    assert!(spec.description.contains("Find tickets"));

    // The version holds what was listed, annotations included.
    let version = registry.agent_version("agent").unwrap();
    let discovered = &version.definition["mcp"]["tickets"]["discovered"];
    let search = discovered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "search_tickets")
        .expect("search_tickets in the version");
    assert_eq!(search["annotations"]["readOnlyHint"], json!(true));
    assert!(log.calls().is_empty(), "listing calls nothing");
}

#[tokio::test]
async fn an_allow_list_offers_only_its_tools_and_a_tool_not_offered_is_refused_at_load() {
    let log = CallLog::new();
    let allowed = tickets_stdio(&log, "tools = [\"search_tickets\"]");
    let registry = load(&agent_file("\"tickets/*\"", "", &allowed)).await;
    assert_eq!(
        registry.agent("agent").unwrap().tools,
        ["tickets/search_tickets"]
    );
    let refused = Registry::load_toml(
        &agent_file("\"tickets/close_ticket\"", "", &allowed),
        Vec::new(),
    )
    .await
    .err()
    .expect("refused");
    assert!(refused.to_string().contains("does not offer"), "{refused}");
    // Loaded without listing (as the reaper does), its agents are
    // delayed, saying how to load it.
    let unlisted = Registry::from_toml(&agent_file("\"tickets/*\"", "", &allowed)).unwrap();
    assert!(unlisted.agent("agent").is_none());
    assert!(
        unlisted.delayed_agents()["agent"].contains("Registry::load"),
        "{:?}",
        unlisted.delayed_agents()
    );
    let written = format!("{allowed}discovered = []\n");
    let refused = Registry::from_toml(&agent_file("\"tickets/*\"", "", &written))
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("not a setting"), "{refused}");
}

#[tokio::test]
async fn a_server_that_cannot_be_listed_delays_its_agents_and_no_other() {
    let log = CallLog::new();
    let text = format!(
        "{}\n[agents.other]\nmodel = {{ provider = \"scripted\", script = [] }}\n[agents.boss]\nsubagents = [\"agent\"]\nmodel = {{ provider = \"scripted\", script = [] }}\n[mcp.gone]\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\ntimeout_ms = 500\n",
        agent_file("\"gone/*\", \"tickets/search_tickets\"", "", &tickets_stdio(&log, ""))
    );
    let registry = load(&text).await;
    let delayed = registry.delayed_agents();
    assert!(delayed["agent"].contains("mcp server gone"), "{delayed:?}");
    assert!(delayed["boss"].contains("sub-agent"), "{delayed:?}");
    assert!(registry.agent("agent").is_none());
    assert!(registry.agent("other").is_some(), "others are served");
    assert!(registry.agent_version("other").is_some());
}

#[tokio::test]
async fn the_reference_server_everything_is_listed_over_stdio() {
    let everything = installed("--everything");
    let text = agent_file(
        "\"everything/*\"",
        "",
        &format!(
            "[mcp.everything]\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\nenv = [\"PATH\"]\n"
        ),
    );
    let registry = load(&text).await;
    let tools = &registry.agent("agent").unwrap().tools;
    assert!(tools.contains(&"everything/echo".to_owned()), "{tools:?}");
    // It speaks an earlier revision (2025-11-25): it is offered no
    // elicitation, so it registers none of its tools that would ask in a
    // request of its own mid-call (they are there for a client that offers
    // it).
    assert!(
        !tools.iter().any(|t| t.contains("elicitation")),
        "{tools:?}"
    );
    // A text result reaches the model as its text.
    let ctx = agentenkit_runtime::ToolContext {
        run_id: agentenkit_core::RunId::new(),
        thread_id: agentenkit_core::ThreadId::new(),
        tool_call_id: "c1".into(),
        approval: None,
        answers: None,
    };
    let echo = registry.tool("everything/echo").unwrap();
    let answer = echo
        .tool
        .execute(json!({ "message": "hello there" }), &ctx)
        .await
        .expect("echo answers");
    assert!(
        answer
            .as_str()
            .is_some_and(|text| text.contains("hello there")),
        "{answer}"
    );
}

#[tokio::test]
async fn mcp_list_shows_each_servers_tools_whether_they_ask_and_what_is_unreachable() {
    let log = CallLog::new();
    let dir = std::env::temp_dir().join(format!("aek-mcp-list-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agentenkit.toml");
    let text = format!(
        "{}\n[agents.other]\ntools = [\"gone/x\"]\nmodel = {{ provider = \"scripted\", script = [] }}\n[mcp.gone]\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\ntimeout_ms = 300\n",
        agent_file("\"tickets/*\"", "", &tickets_stdio(&log, ""))
    );
    std::fs::write(&path, text).unwrap();
    let list = |agent: Option<&str>| {
        agentenkit::mcp::McpCommand::List {
            agent: agent.map(str::to_owned),
        }
        .run(&path)
    };
    let (all, all_listed) = list(None).await.unwrap();
    assert!(!all_listed, "{all}");
    assert!(all.contains("tickets  stdio "), "{all}");
    assert!(
        all.contains("  tickets/search_tickets  read-only  runs at once"),
        "{all}"
    );
    assert!(
        all.contains("  tickets/close_ticket  writes, destructive  asks first"),
        "{all}"
    );
    assert!(
        all.contains("  tickets/create_ticket  no annotations  asks first"),
        "{all}"
    );
    assert!(
        all.contains("gone  stdio /nonexistent/mcp-server  unreachable: "),
        "{all}"
    );
    let (one, listed) = list(Some("agent")).await.unwrap();
    assert!(listed, "{one}");
    assert!(!one.contains("gone"), "only the agent's servers: {one}");
    let (other, _) = list(Some("other")).await.unwrap();
    assert!(other.starts_with("gone  "), "{other}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server's table is checked before anything is started or sent to: a
/// file that will be refused starts no program (and sends no header to
/// an http URL it names).
#[tokio::test]
async fn a_server_table_that_will_be_refused_starts_nothing() {
    let marker = std::env::temp_dir().join(format!("aek-mcp-started-{}", uuid::Uuid::now_v7()));
    let text = agent_file(
        "\"bad/*\"",
        "",
        &format!(
            "[mcp.bad]\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}\"]\ntimeout_ms = 0\n",
            marker.display()
        ),
    );
    let refused = Registry::load_toml(&text, Vec::new())
        .await
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("timeout_ms 0"), "{refused}");
    assert!(!marker.exists(), "the server's program was started");
}

#[tokio::test]
async fn agents_delayed_by_a_server_down_at_start_are_served_once_it_is_up() {
    let log = CallLog::new();
    let port = free_port();
    let text = format!(
        "{}\n[agents.other]\nmodel = {{ provider = \"scripted\", script = [] }}\n",
        agent_file(
            "\"tickets/search_tickets\"",
            r#"{ tool_calls = [ { id = "c1", name = "tickets/search_tickets", arguments = { query = "fire" } } ] }, { text = "Found." },"#,
            &format!("[mcp.tickets]\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_ms = 500\n"),
        )
    );
    let registry = load(&text).await;
    assert!(registry.delayed_agents().contains_key("agent"));
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (status, refused) = new_thread(&env).await;
    assert_ne!(status.as_u16(), 201, "delayed: {refused}");

    // The server comes up: the agent is served without a restart.
    let _server = HttpTickets::start_on(&log, port).await;
    let thread = eventually("the agent is served", || async {
        let (status, thread) = new_thread(&env).await;
        (status.as_u16() == 201).then_some(thread)
    })
    .await;
    let thread_id = thread["id"].as_str().unwrap();
    let started = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "find fire" }),
        )
        .await;
    let run = env
        .wait_run_finished(started["runId"].as_str().unwrap())
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(run["agentVersion"].is_string(), "{run}");
    assert_eq!(log.calls_of("search_tickets").len(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// `POST /threads` for `agent`.
async fn new_thread(env: &TestEnv) -> (reqwest::StatusCode, serde_json::Value) {
    env.send(
        env.http
            .post(env.url("/threads"))
            .bearer_auth(ALICE)
            .json(&json!({ "agent": "agent" })),
    )
    .await
}
