//! How the operator commands print what the API answered: lines for a
//! person at a terminal, every model's or caller's text shown, not obeyed.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::shown::shown;

pub(super) fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// `value` as one line of at most `max` characters, shown as it is (see
/// `crate::shown`).
fn short(value: &Value, max: usize) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let text = if text.chars().count() > max {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    } else {
        text
    };
    shown(&text, false)
}

/// A text field, shown as it is (see `crate::shown`).
fn text(value: &Value) -> String {
    shown(value.as_str().unwrap_or("-"), false)
}

pub(super) fn render_inbox(inbox: &Value) -> String {
    let items = inbox.as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        return "no open requests\n".to_owned();
    }
    let mut out = String::new();
    for item in items {
        render_pending(&mut out, item);
    }
    let _ = writeln!(out, "{} open request(s)", items.len());
    out
}

fn render_pending(out: &mut String, item: &Value) {
    let expires = item["expiresAt"].as_str().unwrap_or("never");
    let _ = writeln!(
        out,
        "{} {} ({}) — run {} call {} — {} {} depth {}, expires {}",
        text(&item["kind"]),
        text(&item["toolName"]),
        text(&item["reason"]),
        text(&item["runId"]),
        text(&item["toolCallId"]),
        text(&item["runName"]),
        text(&item["threadId"]),
        item["depth"],
        expires,
    );
    let _ = writeln!(out, "    arguments: {}", short(&item["arguments"], 200));
    if let Some(hash) = item["argumentsHash"].as_str() {
        let _ = writeln!(out, "    argumentsHash: {}", shown(hash, false));
    }
    if let Some(version) = item["agentVersion"].as_str() {
        let _ = writeln!(out, "    agent version: {}", shown(version, false));
    }
}

pub(super) fn render_thread(thread: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "thread {}  agent {}  status {}  current run {}",
        text(&thread["id"]),
        text(&thread["agent"]),
        text(&thread["status"]),
        text(&thread["currentRunId"]),
    );
    let pending = thread["pendingInputs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if pending.is_empty() {
        out.push_str("no open requests\n");
    }
    for item in pending {
        render_pending(&mut out, item);
    }
    out
}

pub(super) fn render_run(run: &Value, journal: Option<&Value>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {}  {} (depth {})  status {}",
        text(&run["id"]),
        text(&run["name"]),
        run["depth"],
        text(&run["status"]),
    );
    let _ = writeln!(
        out,
        "  thread {}  parent run {}",
        text(&run["threadId"]),
        text(&run["parentRunId"]),
    );
    if let Some(output) = run["output"].as_str() {
        let _ = writeln!(out, "  output: {}", short(&json!(output), 500));
    }
    if let Some(error) = run["error"].as_str() {
        let _ = writeln!(out, "  error: {}", shown(error, false));
    }
    if let Some(entries) = journal.and_then(Value::as_array) {
        let _ = writeln!(out, "  journal ({} entries):", entries.len());
        for entry in entries {
            let _ = writeln!(
                out,
                "  {:>4}  {}  {}",
                entry["position"],
                text(&entry["name"]),
                short(&entry["value"], 160),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_reads_as_lines() {
        assert_eq!(render_inbox(&json!([])), "no open requests\n");
        let text = render_inbox(&json!([{
            "kind": "approval", "toolName": "send_email", "reason": "approval", "runId": "R",
            "toolCallId": "c1", "runName": "mailer", "threadId": "T", "depth": 0,
            "expiresAt": null, "arguments": { "to": "a@b.c" }
        }]));
        assert!(
            text.contains("approval send_email (approval) — run R call c1"),
            "{text}"
        );
        assert!(text.contains("expires never"));
        assert!(text.contains(r#"arguments: {"to":"a@b.c"}"#));
        assert!(text.ends_with("1 open request(s)\n"));
    }

    /// What a model named or wrote reaches the terminal shown, not obeyed:
    /// no escape sequence, no reversed text, no forged line.
    #[test]
    fn the_inbox_shows_escapes_and_bidi_controls_as_text() {
        let text = render_inbox(&json!([{
            "kind": "approval", "toolName": "send\u{1b}[2J_email", "reason": "ok\u{202e}gnp.exe",
            "runId": "R", "toolCallId": "c1", "runName": "mailer\nforged line", "threadId": "T",
            "depth": 0, "expiresAt": null, "arguments": { "to": "a\u{202e}b" }
        }]));
        assert!(
            !text.chars().any(|c| c == '\u{1b}' || c == '\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("send\\u{1b}[2J_email"), "{text}");
        assert!(text.contains("ok\\u{202e}gnp.exe"), "{text}");
        assert!(text.contains("mailer\\u{a}forged line"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
        let run = render_run(
            &json!({ "id": "R", "name": "n", "depth": 0, "status": "failed",
                     "error": "bad\u{1b}]0;title\u{7}", "threadId": "T" }),
            None,
        );
        assert!(!run.contains('\u{1b}') && !run.contains('\u{7}'), "{run:?}");
    }
}
