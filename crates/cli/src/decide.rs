//! `agentenkit decide`: many decisions in one request (`POST
//! /agent/decisions`), read from a file, and its results for people.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};

use crate::shown::shown;

/// The request body from `path` (`-` for standard input): a JSON object
/// `{"decisions": [...]}`, or the bare array of decisions.
pub fn read_decisions(path: &Path) -> anyhow::Result<Value> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading decisions from stdin")?
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading decisions from {}", path.display()))?
    };
    decisions_body(&text)
}

/// The request body of `text`: an object is sent as it is, an array is
/// wrapped as `{"decisions": [...]}`.
pub fn decisions_body(text: &str) -> anyhow::Result<Value> {
    let value: Value = serde_json::from_str(text).context("the decisions are not JSON")?;
    match value {
        Value::Array(_) => Ok(json!({ "decisions": value })),
        Value::Object(_) => Ok(value),
        _ => anyhow::bail!("the decisions must be an array, or an object with \"decisions\""),
    }
}

/// One line per decision, in order, and whether every one was delivered.
pub fn render_results(request: &Value, answer: &Value) -> (String, bool) {
    let items = request["decisions"].as_array().cloned().unwrap_or_default();
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let mut all_delivered = true;
    for (index, result) in results.iter().enumerate() {
        let item = items.get(index).unwrap_or(&Value::Null);
        let body = &result["body"];
        let delivered = body["delivered"].as_bool() == Some(true);
        all_delivered &= delivered;
        let outcome = if delivered {
            "delivered".to_owned()
        } else if body.get("delivered").is_some() {
            format!(
                "not delivered: {}",
                body["error"].as_str().unwrap_or("no reason given")
            )
        } else {
            format!(
                "error {} {}: {}",
                result["status"],
                body["error"].as_str().unwrap_or("Error"),
                body["message"].as_str().unwrap_or("")
            )
        };
        let _ = writeln!(
            out,
            "{index:>3}  {:<8} {} (run {})  {}",
            item["action"].as_str().unwrap_or("?"),
            shown(item["toolCallId"].as_str().unwrap_or("?"), false),
            shown(item["runId"].as_str().unwrap_or("?"), false),
            shown(&outcome, false)
        );
    }
    (out, all_delivered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_array_is_wrapped_and_an_object_sent_as_it_is() {
        let array = decisions_body(r#"[{"action":"skip","runId":"r","toolCallId":"c"}]"#).unwrap();
        assert_eq!(array["decisions"][0]["action"], "skip");
        let object = decisions_body(r#"{"decisions":[]}"#).unwrap();
        assert_eq!(object, json!({ "decisions": [] }));
        assert!(decisions_body("7").is_err());
        assert!(decisions_body("{nope").is_err());
    }

    #[test]
    fn each_result_is_a_line_and_any_failure_is_said() {
        let request = json!({ "decisions": [
            { "action": "approve", "runId": "r1", "toolCallId": "c1" },
            { "action": "deny", "runId": "r1", "toolCallId": "c2\u{1b}[2J" },
            { "action": "skip", "runId": "r1", "toolCallId": "zz" },
        ]});
        let answer = json!({ "results": [
            { "status": 200, "body": { "delivered": true } },
            { "status": 200, "body": { "delivered": false, "error": "This request was already answered" } },
            { "status": 404, "body": { "error": "NotFound", "message": "tool call not found" } },
        ]});
        let (text, all) = render_results(&request, &answer);
        assert!(!all);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].contains("approve") && lines[0].ends_with("delivered"),
            "{text}"
        );
        assert!(lines[1].contains("not delivered: This request was already answered"));
        assert!(
            !text.contains('\u{1b}'),
            "escapes are neutralised: {text:?}"
        );
        assert!(lines[2].contains("error 404 NotFound: tool call not found"));
        let (_, all) = render_results(
            &request,
            &json!({ "results": [
                { "status": 200, "body": { "delivered": true } },
            ]}),
        );
        assert!(all);
    }
}
