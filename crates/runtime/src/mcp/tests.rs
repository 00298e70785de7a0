use serde_json::json;

use super::*;

#[test]
fn a_tool_name_splits_at_the_first_separator() {
    assert_eq!(split("tickets/close"), Some(("tickets", "close")));
    assert_eq!(split("tickets/*"), Some(("tickets", "*")));
    assert_eq!(split("fs/a/b"), Some(("fs", "a/b")));
    assert_eq!(split("send_email"), None);
}

#[test]
fn a_wildcard_is_spelled_out_in_the_servers_order_without_repeats() {
    let all = BTreeMap::from([("t".to_owned(), vec!["t/a".to_owned(), "t/b".to_owned()])]);
    let tools = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(
        expand(tools(&["x", "t/b", "t/*", "x"]), &all),
        tools(&["x", "t/b", "t/a"])
    );
    // A server not listed keeps its wildcard, which the check refuses.
    assert_eq!(expand(tools(&["u/*"]), &all), tools(&["u/*"]));
}

#[test]
fn agents_naming_an_unlisted_server_and_those_delegating_to_them_are_delayed() {
    let mut tree = json!({
        "mcp": {
            "up": { "transport": "stdio", "command": "x", "discovered": [] },
            "down": { "transport": "stdio", "command": "y" },
            "never": { "transport": "stdio", "command": "z" },
        },
        "agents": {
            "a": { "tools": ["down/*"] },
            "b": { "subagents": ["a"] },
            "c": { "subagents": ["b"] },
            "d": { "tools": ["up/x", "local"] },
            "e": { "tools": ["never/t"] },
        },
    });
    let failed = BTreeMap::from([("down".to_owned(), "could not be listed: refused".to_owned())]);
    let (delayed, unlisted) = delay_unlisted(&mut tree, &failed);
    let servers: Vec<&str> = unlisted.keys().map(String::as_str).collect();
    assert_eq!(servers, ["down", "never"]);
    let names: Vec<&str> = delayed.keys().map(String::as_str).collect();
    assert_eq!(names, ["a", "b", "c", "e"]);
    assert!(delayed["a"].contains("mcp server down could not be listed: refused"));
    assert!(delayed["c"].contains("sub-agent \"b\""));
    assert!(delayed["e"].contains("Registry::load"));
    let left: Vec<&String> = tree["agents"].as_object().unwrap().keys().collect();
    assert_eq!(left, ["d"]);
}

#[test]
fn the_servers_agents_name_are_found() {
    let agents = json!({
        "a": { "tools": ["t/x", "local", "u/*"] },
        "b": { "tools": [1, "t/y"] },
        "c": {},
    });
    let named: BTreeSet<&str> = agents
        .as_object()
        .unwrap()
        .values()
        .flat_map(servers_named_by)
        .collect();
    assert_eq!(named.into_iter().collect::<Vec<_>>(), ["t", "u"]);
    let b: Vec<&str> = servers_named_by(&agents["b"]).collect();
    assert_eq!(b, ["t"], "a name that is not text is passed over");
}
