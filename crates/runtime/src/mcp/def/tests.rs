use super::*;
use proptest::prelude::*;

fn stdio() -> ServerDef {
    ServerDef {
        transport: Transport::Stdio,
        command: Some("python3".into()),
        args: vec!["server.py".into()],
        env: vec!["TICKETS_TOKEN".into()],
        url: None,
        headers: BTreeMap::new(),
        timeout_ms: None,
        max_response_bytes: None,
        tools: None,
        require_approval: BTreeMap::new(),
        approvals: BTreeMap::new(),
        remind_after: None,
        escalate_to: None,
        discovered: None,
    }
}

fn http(url: &str) -> ServerDef {
    ServerDef {
        transport: Transport::Http,
        command: None,
        args: vec![],
        env: vec![],
        url: Some(url.into()),
        ..stdio()
    }
}

fn tool(name: &str, annotations: Option<Annotations>) -> DiscoveredTool {
    DiscoveredTool {
        name: name.into(),
        description: String::new(),
        input_schema: serde_json::json!({ "type": "object" }),
        annotations,
    }
}

fn hints(read_only: Option<bool>, destructive: Option<bool>) -> Option<Annotations> {
    Some(Annotations {
        read_only_hint: read_only,
        destructive_hint: destructive,
        ..Annotations::default()
    })
}

#[test]
fn only_a_tool_marked_read_only_runs_without_asking() {
    let mode = ApprovalMode::Annotations;
    assert!(!tool("t", hints(Some(true), None)).asks_first(mode));
    assert!(!tool("t", hints(Some(true), Some(false))).asks_first(mode));
    // Failing closed: no hints, no read-only hint, or a contradiction.
    assert!(tool("t", None).asks_first(mode));
    assert!(tool("t", hints(None, None)).asks_first(mode));
    assert!(tool("t", hints(Some(false), Some(false))).asks_first(mode));
    assert!(tool("t", hints(None, Some(true))).asks_first(mode));
    assert!(tool("t", hints(Some(true), Some(true))).asks_first(mode));
    assert!(tool("t", hints(Some(true), None)).asks_first(ApprovalMode::Always));
    assert!(!tool("t", None).asks_first(ApprovalMode::Never));
}

#[test]
fn only_a_tool_marked_read_only_and_not_destructive_can_be_rolled_back() {
    assert!(tool("t", hints(Some(true), None)).read_only());
    assert!(tool("t", hints(Some(true), Some(false))).read_only());
    assert!(!tool("t", None).read_only());
    assert!(!tool("t", hints(None, None)).read_only());
    assert!(!tool("t", hints(Some(true), Some(true))).read_only());
    // Whatever the server's table says of approvals: asking a person
    // first does not undo what a call did.
    let mut def = stdio();
    def.require_approval.insert("t".into(), ApprovalMode::Never);
    assert!(!def.asks_first(&tool("t", None)));
    assert!(!tool("t", None).read_only());
}

#[test]
fn the_servers_table_overrides_annotations_per_tool() {
    let mut def = stdio();
    def.require_approval
        .insert("search".into(), ApprovalMode::Always);
    def.require_approval
        .insert("create".into(), ApprovalMode::Never);
    assert!(def.asks_first(&tool("search", hints(Some(true), None))));
    assert!(!def.asks_first(&tool("create", None)));
    assert!(def.asks_first(&tool("other", None)));
}

#[test]
fn the_allow_list_decides_what_is_offered() {
    let mut def = stdio();
    assert!(def.offered().is_none(), "nothing before discovery");
    def.discovered = Some(vec![tool("a", None), tool("b", None)]);
    let all: Vec<&str> = def.offered().unwrap().map(|t| t.name.as_str()).collect();
    assert_eq!(all, ["a", "b"]);
    def.tools = Some(vec!["b".into(), "gone".into()]);
    let allowed: Vec<&str> = def.offered().unwrap().map(|t| t.name.as_str()).collect();
    assert_eq!(allowed, ["b"]);
}

/// Checks that `def` is refused as server `name`, saying `says`.
fn refused(def: ServerDef, name: &str, says: &str) {
    let e = def.check(name).expect_err(says);
    assert!(e.contains(says), "{e} (expected {says:?})");
    assert!(e.starts_with(&format!("mcp server {name}:")), "{e}");
}

#[test]
fn a_transport_is_checked_with_errors_that_say_what() {
    assert_eq!(stdio().check("tickets"), Ok(()));
    assert_eq!(http("https://mcp.example/mcp").check("t"), Ok(()));
    assert_eq!(http("http://127.0.0.1:8000/mcp").check("t"), Ok(()));
    assert_eq!(http("http://localhost:8000/mcp").check("t"), Ok(()));
    refused(http("http://mcp.example/mcp"), "t", "must be https");
    refused(http("ftp://mcp.example/mcp"), "t", "must be https");
    refused(http("not a url"), "t", "invalid url");
    refused(
        ServerDef {
            command: None,
            ..stdio()
        },
        "t",
        "needs a command",
    );
    refused(
        ServerDef {
            command: Some(" ".into()),
            ..stdio()
        },
        "t",
        "needs a command",
    );
    refused(
        ServerDef {
            url: None,
            ..http("https://x")
        },
        "t",
        "needs a url",
    );
    refused(
        ServerDef {
            url: Some("https://x".into()),
            ..stdio()
        },
        "t",
        "for transport = \"http\"",
    );
    refused(
        ServerDef {
            args: vec!["x".into()],
            ..http("https://x")
        },
        "t",
        "for transport = \"stdio\"",
    );
    refused(
        ServerDef {
            env: vec!["A=B".into()],
            ..stdio()
        },
        "t",
        "environment variable",
    );
    let mut bad_header = http("https://x");
    bad_header.headers.insert("Bad Header".into(), "V".into());
    refused(bad_header, "t", "not a header name");
}

#[test]
fn names_limits_and_lists_are_checked_with_errors_that_say_what() {
    refused(
        ServerDef {
            timeout_ms: Some(0),
            ..stdio()
        },
        "t",
        "timeout_ms 0",
    );
    refused(
        ServerDef {
            max_response_bytes: Some(0),
            ..stdio()
        },
        "t",
        "max_response_bytes 0",
    );
    let mut unlisted = stdio();
    unlisted.tools = Some(vec!["a".into()]);
    unlisted
        .require_approval
        .insert("b".into(), ApprovalMode::Never);
    refused(
        unlisted,
        "t",
        "require_approval names \"b\", which its tools list leaves out",
    );
    let mut unlisted = stdio();
    unlisted.tools = Some(vec!["a".into()]);
    unlisted.approvals.insert("b".into(), Default::default());
    refused(unlisted, "t", "approvals names \"b\"");
    for name in ["", "a/b", "a__b", "a b", "ä"] {
        refused(stdio(), name, "a server's name");
    }
}

#[test]
fn the_connection_is_what_says_which_server_it_is() {
    let mut other_limits = stdio();
    other_limits.timeout_ms = Some(5);
    other_limits.tools = Some(vec![]);
    assert_eq!(stdio().connection(), other_limits.connection());
    let mut other_env = stdio();
    other_env.env.push("PATH".into());
    assert_ne!(stdio().connection(), other_env.connection());
}

proptest! {
    /// Any table under `[mcp.x]` is parsed and checked or refused, never a
    /// panic.
    #[test]
    fn any_server_table_is_checked_or_refused(
        transport in prop_oneof![Just("stdio"), Just("http"), Just("grpc")],
        command in proptest::option::of("\\PC{0,12}"),
        url in proptest::option::of("\\PC{0,30}"),
        timeout in proptest::option::of(0u64..5_000_000),
        bytes in proptest::option::of(0u64..100_000_000),
        name in "\\PC{0,8}",
    ) {
        let mut table = toml::Table::new();
        table.insert("transport".into(), transport.into());
        if let Some(command) = command { table.insert("command".into(), command.into()); }
        if let Some(url) = url { table.insert("url".into(), url.into()); }
        if let Some(t) = timeout { table.insert("timeout_ms".into(), (t as i64).into()); }
        if let Some(b) = bytes { table.insert("max_response_bytes".into(), (b as i64).into()); }
        if let Ok(def) = table.try_into::<ServerDef>() {
            if def.check(&name).is_ok() {
                prop_assert!(def.timeout().as_millis() >= 1);
                prop_assert!(def.max_response_bytes() >= 1);
            }
        }
    }
}
