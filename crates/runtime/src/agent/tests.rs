use super::*;

fn agents(subagents: &[(&str, &[&str])]) -> String {
    subagents
        .iter()
        .map(|(name, subs)| {
            let subs: Vec<String> = subs.iter().map(|s| format!("{s:?}")).collect();
            format!(
                "[agents.{name}]\nsubagents = [{}]\nmodel = {{ provider = \"scripted\", script = [] }}\n",
                subs.join(", ")
            )
        })
        .collect()
}

#[test]
fn a_cycle_of_delegations_is_refused_when_the_file_loads() {
    let own = Registry::from_toml(&agents(&[("a", &["a"])]))
        .err()
        .unwrap();
    assert!(
        own.to_string().contains("delegations form a cycle: a → a"),
        "{own}"
    );
    let long = Registry::from_toml(&agents(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]))
        .err()
        .unwrap();
    assert!(long.to_string().contains("a → b → c → a"), "{long}");
    // A diamond shares a sub-agent without a cycle.
    let diamond = Registry::from_toml(&agents(&[
        ("a", &["b", "c"]),
        ("b", &["d"]),
        ("c", &["d"]),
        ("d", &[]),
    ]));
    assert!(diamond.is_ok());
}

#[test]
fn an_http_tools_limits_are_checked_when_the_file_loads() {
    let tool = |extra: &str| {
        Registry::from_toml(&format!(
            "[tools.t]\ntype = \"http\"\nurl = \"http://127.0.0.1:1/x\"\n{extra}\n"
        ))
    };
    assert!(tool("timeout_ms = 1500\nmax_response_bytes = 4096").is_ok());
    let zero = tool("timeout_ms = 0").err().unwrap().to_string();
    assert!(zero.contains("timeout_ms 0"), "{zero}");
    let long = tool("timeout_ms = 3600001").err().unwrap().to_string();
    assert!(long.contains("timeout_ms"), "{long}");
    let empty = tool("max_response_bytes = 0").err().unwrap().to_string();
    assert!(empty.contains("max_response_bytes"), "{empty}");
    let bad = Registry::from_toml("[tools.t]\ntype = \"http\"\nurl = \"not a url?token=s3cret\"\n")
        .err()
        .unwrap()
        .to_string();
    assert!(
        bad.contains("invalid url") && !bad.contains("s3cret"),
        "{bad}"
    );
}

#[test]
fn max_depth_comes_from_the_file_or_defaults_to_8() {
    assert_eq!(
        Registry::from_toml(&agents(&[("a", &[])]))
            .unwrap()
            .max_depth(),
        8
    );
    let file = format!("max_depth = 2\n{}", agents(&[("a", &[])]));
    assert_eq!(Registry::from_toml(&file).unwrap().max_depth(), 2);
}

#[test]
fn dangling_names_are_configuration_errors() {
    let err = Registry::from_toml(
        "[agents.a]\ntools = [\"nope\"]\nmodel = { provider = \"scripted\", script = [] }\n",
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "invalid agent configuration: agent \"a\" names unknown tool \"nope\""
    );
    let err = Registry::from_toml(
        "[agents.a]\nsubagents = [\"b\"]\nmodel = { provider = \"scripted\", script = [] }\n",
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("unknown sub-agent"));
}

#[test]
fn sub_agents_are_offered_as_delegation_tools() {
    let r = Registry::from_toml(
        "[agents.a]\nsubagents = [\"b\"]\nmodel = { provider = \"scripted\", script = [] }\n[agents.b]\nmodel = { provider = \"scripted\", script = [] }\n",
    )
    .unwrap();
    let specs = r.tool_specs(r.agent("a").unwrap());
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].name, "b");
    assert_eq!(specs[0].input_schema["required"][0], "task");
}

#[test]
fn agent_defaults() {
    let r = Registry::from_toml("[agents.a]\nmodel = { provider = \"scripted\", script = [] }\n")
        .unwrap();
    let a = r.agent("a").unwrap();
    assert_eq!(a.hitl_ttl_ms, 900_000);
    assert!(r.tool_specs(a).is_empty());
    assert!(r.agent("b").is_none());
}

#[test]
fn repeated_denials_are_refused_unless_a_tool_says_to_ask_again() {
    let file = |extra: &str| {
        Registry::from_toml(&format!(
            "[tools.t]\ntype = \"echo\"\nrequires_confirmation = true\n{extra}\n"
        ))
        .unwrap()
    };
    let refuses = |r: &Registry| r.tool("t").unwrap().tool.refuses_repeated_denials();
    let default = file("");
    assert!(refuses(&default));
    let asks = file("refuse_repeated_denials = false");
    assert!(!refuses(&asks));
    assert!(
        asks.tool("t").unwrap().tool.requires_confirmation(),
        "still asks first"
    );
    assert!(
        Registry::from_toml("[tools.t]\ntype = \"echo\"\nrefuse_repeated_denials = 1\n").is_err()
    );
}

#[test]
fn approvals_from_several_people_need_a_confirmed_tool_and_one_at_least() {
    let file = |tool: &str| Registry::from_toml(&format!("[tools.t]\ntype = \"echo\"\n{tool}\n"));
    let two = file("requires_confirmation = true\napprovals = { required = 2, from = [\"ops\"] }")
        .unwrap();
    assert_eq!(
        two.approval_rule("t"),
        ApprovalRule {
            required: 2,
            from: vec!["ops".into()]
        }
    );
    assert!(two.approval_rule("other").is_single());
    let unconfirmed = file("approvals = { required = 2 }")
        .err()
        .unwrap()
        .to_string();
    assert!(
        unconfirmed.contains("requires_confirmation"),
        "{unconfirmed}"
    );
    let none = file("requires_confirmation = true\napprovals = { required = 0 }")
        .err()
        .unwrap()
        .to_string();
    assert!(none.contains("at least 1"), "{none}");
}

fn echo(name: &str) -> Arc<dyn Tool> {
    Arc::new(crate::tool::EchoTool::new(
        crate::tool::ToolSpec {
            name: name.into(),
            description: "echoes".into(),
            input_schema: serde_json::json!({ "type": "object" }),
        },
        false,
    ))
}

#[test]
fn a_tool_in_code_may_not_take_the_question_tools_name_or_a_file_tools() {
    let file = "[tools.send]\ntype = \"http\"\nurl = \"http://127.0.0.1:1/send\"\n\
                [agents.a]\ntools = [\"send\", \"lookup\"]\n\
                model = { provider = \"scripted\", script = [] }\n";
    let loaded = Registry::from_toml_with_tools(file, vec![echo("lookup")]).unwrap();
    assert!(loaded.tool("lookup").is_some() && loaded.tool("send").is_some());
    let ask = Registry::from_toml_with_tools(file, vec![echo("ask")])
        .err()
        .unwrap();
    assert!(ask.to_string().contains("built-in question tool"), "{ask}");
    let twice = Registry::from_toml_with_tools(file, vec![echo("send")])
        .err()
        .unwrap();
    assert!(
        twice
            .to_string()
            .contains("defined in the file and in code"),
        "{twice}"
    );
    let built = Registry::default().with_tool(echo("ask")).err().unwrap();
    assert!(
        built.to_string().contains("built-in question tool"),
        "{built}"
    );
}

#[test]
fn a_tool_marked_read_only_is_one_its_agent_and_the_agents_above_it_may_roll_back() {
    let file = r#"
[agents.lead]
tools = ["search", "send"]
subagents = ["helper"]
on_active = "rollback"
model = { provider = "scripted", script = [] }

[agents.helper]
tools = ["peek"]
model = { provider = "scripted", script = [] }

[tools.search]
type = "echo"
read_only = true
refuse_repeated_denials = false

[tools.send]
type = "echo"
requires_confirmation = true

[tools.peek]
type = "http"
url = "http://127.0.0.1:9/"
read_only = true
requires_confirmation = true
"#;
    let registry = Registry::from_toml(file).unwrap();
    assert_eq!(registry.read_only_tools("lead"), ["peek", "search"]);
    assert_eq!(registry.read_only_tools("helper"), ["peek"]);
    assert!(registry.read_only_tools("nobody").is_empty());
    // The other marks a tool carries are kept with it.
    let peek = &registry.tool("peek").unwrap().tool;
    assert!(peek.read_only() && peek.requires_confirmation());
    let search = &registry.tool("search").unwrap().tool;
    assert!(search.read_only() && !search.refuses_repeated_denials());
    assert!(!registry.tool("send").unwrap().tool.read_only());
    assert!(registry.any_on_active());
    assert_eq!(
        registry.agent("lead").unwrap().on_active,
        agentenkit_core::conversation::OnActive::Rollback
    );
    let plain = Registry::from_toml(&agents(&[("a", &[])])).unwrap();
    assert!(!plain.any_on_active());
    let wrong = Registry::from_toml(&format!("{}on_active = \"later\"\n", agents(&[("a", &[])])));
    assert!(wrong.is_err());
}
