//! Where a version sends, and with what: the settings of a stored version
//! that a worker does not take on the stored row's word.
//!
//! A row of `agent_versions` configures the workers that serve runs pinned
//! to it. What it says about prompts and tools is checked by its hash; what
//! it says about endpoints (a model's `base_url`, `api_key_env` and
//! `ca_file`, an http tool's `url`) is taken only when the serving
//! deployment's own file names the same values: a row written by hand
//! cannot send a provider key, or a tool's arguments, anywhere the
//! deployment does not already send them.
//!
//! URLs are stored without their userinfo, query and fragment (where
//! tokens live); the hash covers them whole, so a version is restored with
//! the deployment's own URL of the same address before its hash is
//! checked.

use serde_json::Value;

/// Where in an agent file an endpoint setting lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `agents.NAME.model.KEY`
    Model,
    /// `tools.NAME.KEY`
    Tool,
}

impl Place {
    /// The section of an agent file whose entries hold such settings.
    fn section(self) -> &'static str {
        match self {
            Place::Model => "agents",
            Place::Tool => "tools",
        }
    }
}

/// One endpoint setting: where, its key, and whether it is a URL.
#[derive(Debug, Clone, Copy)]
struct Setting {
    place: Place,
    key: &'static str,
    url: bool,
}

/// Every setting a stored version must share with the serving file.
const SETTINGS: [Setting; 4] = [
    Setting {
        place: Place::Model,
        key: "base_url",
        url: true,
    },
    Setting {
        place: Place::Model,
        key: "api_key_env",
        url: false,
    },
    Setting {
        place: Place::Model,
        key: "ca_file",
        url: false,
    },
    Setting {
        place: Place::Tool,
        key: "url",
        url: true,
    },
];

/// The objects of `file` that hold settings of `place` (each agent's
/// model, each tool), mutably.
fn holders_mut(file: &mut Value, place: Place) -> Vec<&mut serde_json::Map<String, Value>> {
    let Some(entries) = file.get_mut(place.section()).and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    entries
        .values_mut()
        .filter_map(|entry| match place {
            Place::Model => entry.get_mut("model")?.as_object_mut(),
            Place::Tool => entry.as_object_mut(),
        })
        .collect()
}

/// The values `file` gives `setting`, anywhere.
fn values_of(file: &Value, setting: Setting) -> Vec<String> {
    let Some(entries) = file.get(setting.place.section()).and_then(Value::as_object) else {
        return Vec::new();
    };
    entries
        .values()
        .filter_map(|entry| match setting.place {
            Place::Model => entry.get("model"),
            Place::Tool => Some(entry),
        })
        .filter_map(|holder| holder.get(setting.key)?.as_str().map(str::to_owned))
        .collect()
}

/// `url` without userinfo, query and fragment; a text that is no URL is
/// kept (its file would not load).
pub fn address_of(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return url.to_owned();
    };
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    parsed.set_fragment(None);
    parsed.into()
}

/// `definition` as it is stored: every URL setting reduced to its address.
pub fn stored_form(definition: &Value) -> Value {
    let mut stored = definition.clone();
    for server in servers_mut(&mut stored) {
        if let Some(Value::String(url)) = server.get_mut("url") {
            *url = address_of(url);
        }
    }
    for setting in SETTINGS.iter().filter(|s| s.url) {
        for holder in holders_mut(&mut stored, setting.place) {
            if let Some(Value::String(url)) = holder.get_mut(setting.key) {
                *url = address_of(url);
            }
        }
    }
    stored
}

/// `stored` (a version as read back) with each endpoint setting the
/// serving file (the deployment's) names taken from it: a URL it names at
/// the same address comes back whole; a name or path must be one it names.
/// A setting it does not name stays as stored, and the first such is
/// returned as the reason this deployment does not send for the version.
pub fn restored(stored: &Value, serving: &Value) -> (Value, Option<String>) {
    let mut restored = stored.clone();
    let mut unnamed = restore_servers(&mut restored, serving);
    for setting in SETTINGS {
        let named = values_of(serving, setting);
        for holder in holders_mut(&mut restored, setting.place) {
            let Some(Value::String(value)) = holder.get_mut(setting.key) else {
                continue;
            };
            let found = if setting.url {
                let address = address_of(value);
                named.iter().find(|url| address_of(url) == address)
            } else {
                named.iter().find(|name| *name == value)
            };
            match found {
                Some(own) => *value = own.clone(),
                None if unnamed.is_none() => {
                    let shown = if setting.url {
                        address_of(value)
                    } else {
                        value.clone()
                    };
                    unnamed = Some(format!(
                        "its {} {shown:?} is not one this deployment's agent file names",
                        setting.key
                    ));
                }
                None => {}
            }
        }
    }
    (restored, unnamed)
}

/// Each `[mcp.NAME]` of `file`, mutably.
fn servers_mut(file: &mut Value) -> Vec<&mut serde_json::Map<String, Value>> {
    file.get_mut("mcp")
        .and_then(Value::as_object_mut)
        .map(|servers| {
            servers
                .values_mut()
                .filter_map(Value::as_object_mut)
                .collect()
        })
        .unwrap_or_default()
}

/// Restores each MCP server of `stored` from the serving file's server of
/// the same name, when that one connects the same way (its URL at the same
/// address): a version may start a program, or send arguments, only as the
/// deployment's own file does. The first server it does not name so is
/// the reason returned.
fn restore_servers(stored: &mut Value, serving: &Value) -> Option<String> {
    let mut unnamed = None;
    let servers = stored.get_mut("mcp").and_then(Value::as_object_mut)?;
    for (name, server) in servers.iter_mut() {
        let own = serving.pointer(&format!("/mcp/{name}"));
        let same = |key: &str| {
            let theirs = server.get(key);
            let ours = own.and_then(|o| o.get(key));
            match (key, theirs, ours) {
                ("url", Some(Value::String(a)), Some(Value::String(b))) => {
                    address_of(a) == address_of(b)
                }
                _ => theirs == ours,
            }
        };
        match own {
            Some(own) if crate::mcp::def::CONNECTION.iter().all(|key| same(key)) => {
                if let (Some(url), Some(slot)) = (own.get("url"), server.get_mut("url")) {
                    *slot = url.clone();
                }
            }
            _ if unnamed.is_none() => {
                unnamed = Some(format!(
                    "its mcp server {name} is not one this deployment's agent file names, connected the same way"
                ));
            }
            _ => {}
        }
    }
    unnamed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(base_url: &str, key_env: &str, tool_url: &str) -> Value {
        json!({
            "agents": { "a": { "system": "s", "tools": ["t"], "model": {
                "provider": "openai", "model": "m", "base_url": base_url,
                "api_key_env": key_env, "ca_file": "/etc/ca.pem" } } },
            "tools": { "t": { "type": "http", "url": tool_url } },
        })
    }

    #[test]
    fn urls_are_stored_without_userinfo_query_or_fragment() {
        let stored = stored_form(&file(
            "https://user:pw@llm.example/v1?key=s#f",
            "K",
            "https://tools.example/t?token=s",
        ));
        assert_eq!(
            stored["agents"]["a"]["model"]["base_url"],
            "https://llm.example/v1"
        );
        assert_eq!(stored["tools"]["t"]["url"], "https://tools.example/t");
        assert_eq!(stored["agents"]["a"]["model"]["api_key_env"], "K");
    }

    #[test]
    fn a_version_is_restored_with_the_serving_files_own_urls() {
        let full = file(
            "https://llm.example/v1?key=s",
            "K",
            "https://tools.example/t?token=s",
        );
        assert_eq!(restored(&stored_form(&full), &full), (full, None));
    }

    #[test]
    fn an_endpoint_the_serving_file_does_not_name_is_refused() {
        let serving = file("https://llm.example/v1", "K", "https://tools.example/t");
        for (stored, named) in [
            (
                file("https://evil.example/v1", "K", "https://tools.example/t"),
                "base_url",
            ),
            (
                file(
                    "https://llm.example/v1",
                    "AWS_SECRET",
                    "https://tools.example/t",
                ),
                "api_key_env",
            ),
            (
                file("https://llm.example/v1", "K", "https://evil.example/t"),
                "url",
            ),
        ] {
            let (kept, refused) = restored(&stored, &serving);
            let refused = refused.expect("refused");
            assert!(refused.contains(named), "{refused}");
            assert_eq!(kept, stored, "an unnamed setting stays as stored");
        }
        let mut other_ca = file("https://llm.example/v1", "K", "https://tools.example/t");
        other_ca["agents"]["a"]["model"]["ca_file"] = json!("/tmp/mine.pem");
        assert!(restored(&other_ca, &serving)
            .1
            .is_some_and(|refused| refused.contains("ca_file")));
    }

    fn with_servers(stdio_args: &[&str], http_url: &str) -> Value {
        json!({
            "agents": { "a": { "tools": ["fs/*", "tix/*"], "model": { "provider": "scripted" } } },
            "mcp": {
                "fs": { "transport": "stdio", "command": "npx", "args": stdio_args, "env": ["HOME"],
                        "discovered": [{ "name": "read", "inputSchema": { "type": "object" } }] },
                "tix": { "transport": "http", "url": http_url, "headers": { "Authorization": "TIX_TOKEN" },
                         "discovered": [] },
            },
        })
    }

    #[test]
    fn an_mcp_server_is_taken_only_as_the_serving_file_connects_it() {
        let full = with_servers(&["server-fs", "/data"], "https://tix.example/mcp?k=s");
        let stored = stored_form(&full);
        assert_eq!(stored["mcp"]["tix"]["url"], "https://tix.example/mcp");
        // The same connection (what was listed may differ: the version's
        // own is kept) is restored whole.
        let mut serving = full.clone();
        serving["mcp"]["fs"]["discovered"] = json!([]);
        let (back, refused) = restored(&stored, &serving);
        assert_eq!(refused, None);
        assert_eq!(back, full);
        for (other, named) in [
            (
                with_servers(&["server-fs", "/"], "https://tix.example/mcp"),
                "fs",
            ),
            (
                with_servers(&["server-fs", "/data"], "https://evil.example/mcp"),
                "tix",
            ),
        ] {
            let refused = restored(&stored, &other).1.expect("refused");
            assert!(
                refused.contains(&format!("mcp server {named}")),
                "{refused}"
            );
        }
        let mut other_env = full.clone();
        other_env["mcp"]["fs"]["env"] = json!(["HOME", "AWS_SECRET_ACCESS_KEY"]);
        assert!(restored(&stored, &other_env).1.is_some());
        let mut gone = full.clone();
        gone["mcp"].as_object_mut().unwrap().remove("tix");
        assert!(restored(&stored, &gone)
            .1
            .is_some_and(|r| r.contains("tix")));
    }

    #[test]
    fn a_setting_the_version_does_not_have_needs_nothing() {
        let stored = json!({ "agents": { "a": { "model": { "provider": "scripted" } } } });
        assert_eq!(restored(&stored, &json!({})), (stored, None));
    }
}
