//! What a notification says: the JSON envelope, or a Slack message.

use agentenkit_core::{RunId, ThreadId};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::NotificationFormat;

/// The type of a reminder's notification (no stream event has it).
pub const REMINDER_EVENT: &str = "INPUT_REMINDER";

/// One delivery, whatever its format.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// An event's stream id (as text), or `remind:<run>:<call>`: the same
    /// in every attempt, for receivers to drop copies by.
    pub id: String,
    /// The event's type, or [`REMINDER_EVENT`].
    pub event_type: String,
    pub thread_id: ThreadId,
    pub run_id: Option<RunId>,
    pub created_at: DateTime<Utc>,
    /// The event's data as the stream has it (a reminder: the request).
    pub data: Value,
}

impl Delivery {
    /// An event, as the stream has it.
    pub fn of(event: agentenkit_store::EventView) -> Delivery {
        Delivery {
            id: event.id.to_string(),
            event_type: event.event_type.as_str().to_owned(),
            thread_id: event.thread_id,
            run_id: event.run_id,
            created_at: event.created_at,
            data: event.data,
        }
    }
}

/// The body sent: the same bytes in every attempt.
pub fn body(delivery: &Delivery, format: NotificationFormat, link: Option<&str>) -> Vec<u8> {
    let value = match format {
        NotificationFormat::Json => json!({
            "id": delivery.id,
            "type": delivery.event_type,
            "threadId": delivery.thread_id,
            "runId": delivery.run_id,
            "createdAt": delivery.created_at,
            "data": delivery.data,
            "link": link,
        }),
        NotificationFormat::Slack => {
            let summary = summary(delivery);
            let text = match link {
                Some(link) => format!("{summary}\n<{link}|Open the inbox>"),
                None => summary.clone(),
            };
            json!({
                "text": text,
                "blocks": [
                    { "type": "section", "text": { "type": "mrkdwn", "text": text } },
                    { "type": "context", "elements": [
                        { "type": "mrkdwn", "text": format!(
                            "{} · thread `{}` · id `{}`",
                            delivery.event_type, delivery.thread_id, delivery.id
                        ) }
                    ] }
                ],
            })
        }
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// How much of one value (a reason, an error) a Slack message quotes.
const SLACK_VALUE_CHARS: usize = 300;

/// `text` as Slack's mrkdwn shows it literally: `&`, `<` and `>` escaped
/// as Slack asks, so a model's or caller's words cannot mention
/// `<!channel>`, a person or a link; a backtick made a lookalike, so it
/// cannot end the code span it stands in; cut to a few hundred characters.
fn slack_literal(text: &str) -> String {
    let text = agentenkit_core::questions::clip(text, SLACK_VALUE_CHARS);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\u{2035}'),
            c => out.push(c),
        }
    }
    out
}

/// A text field of an event's data, as a Slack message may quote it.
fn text(data: &Value, key: &str) -> Option<String> {
    data.get(key).and_then(Value::as_str).map(slack_literal)
}

/// One line a person reads: what happened, to which tool or run. Every
/// value is quoted literally ([`slack_literal`]).
pub fn summary(delivery: &Delivery) -> String {
    let data = &delivery.data;
    let tool = text(data, "toolName").unwrap_or_else(|| "a tool".to_owned());
    let reason = text(data, "reason")
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let run = text(data, "runName")
        .map(|name| format!(" (agent {name})"))
        .unwrap_or_default();
    match delivery.event_type.as_str() {
        "INPUT_REQUIRED" => match text(data, "kind").as_deref() {
            Some("ask") => format!("Questions are waiting for an answer{run}{reason}"),
            _ => format!("Approval needed for `{tool}`{run}{reason}"),
        },
        "INPUT_RESOLVED" => {
            let status = text(data, "status").unwrap_or_else(|| "resolved".to_owned());
            match text(data, "answeredBy") {
                Some(by) => format!("`{tool}` was {status} by {by}"),
                None => format!("`{tool}` was {status}"),
            }
        }
        "APPROVAL_RECORDED" => format!(
            "`{tool}`: {} of {} approvals{}",
            data.get("given").and_then(Value::as_u64).unwrap_or(0),
            data.get("required").and_then(Value::as_u64).unwrap_or(0),
            text(data, "answeredBy")
                .map(|by| format!(" (last by {by})"))
                .unwrap_or_default()
        ),
        "RUN_COMPLETED" => "A run completed".to_owned(),
        "RUN_FAILED" => match data.get("error") {
            Some(Value::String(error)) => format!("A run failed: {}", slack_literal(error)),
            Some(other) => format!("A run failed: {}", slack_literal(&other.to_string())),
            None => "A run failed".to_owned(),
        },
        "RUN_CANCELLED" => format!(
            "A run was cancelled{}",
            text(data, "reason")
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        REMINDER_EVENT => format!(
            "Still waiting after {}: {}{run}{reason}",
            text(data, "waited").unwrap_or_else(|| "a while".to_owned()),
            match text(data, "kind").as_deref() {
                Some("park") => format!("the job `{tool}`"),
                _ => format!("approval of `{tool}`"),
            }
        ),
        other => format!("{other} in thread {}", delivery.thread_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(event_type: &str, data: Value) -> Delivery {
        Delivery {
            id: "42".into(),
            event_type: event_type.into(),
            thread_id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".parse().unwrap(),
            run_id: Some("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c".parse().unwrap()),
            created_at: "2026-12-05T10:00:00Z".parse().unwrap(),
            data,
        }
    }

    #[test]
    fn the_json_envelope_carries_the_event_whole() {
        let d = delivery(
            "INPUT_REQUIRED",
            json!({ "toolName": "send_email", "arguments": { "to": "a@b.c" } }),
        );
        let body: Value =
            serde_json::from_slice(&body(&d, NotificationFormat::Json, Some("https://x/ui")))
                .unwrap();
        assert_eq!(body["id"], "42");
        assert_eq!(body["type"], "INPUT_REQUIRED");
        assert_eq!(body["threadId"], "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
        assert_eq!(body["data"]["arguments"]["to"], "a@b.c");
        assert_eq!(body["link"], "https://x/ui");
        assert_eq!(body["createdAt"], "2026-12-05T10:00:00Z");
    }

    /// A model's or caller's words cannot mention the channel, a person or
    /// a link, nor end the code span a tool's name stands in.
    #[test]
    fn slack_messages_quote_every_value_literally() {
        let d = delivery(
            "INPUT_REQUIRED",
            json!({ "toolName": "send`<!channel>", "kind": "approval",
                    "reason": "<!channel> see <https://evil.example|the invoice> & <@U123>",
                    "runName": "m<!here>" }),
        );
        let said = summary(&d);
        assert!(!said.contains('<') && !said.contains('>'), "{said}");
        assert!(
            said.contains(
                "&lt;!channel&gt; see &lt;https://evil.example|the invoice&gt; &amp; &lt;@U123&gt;"
            ),
            "{said}"
        );
        assert_eq!(said.matches('`').count(), 2, "one code span: {said}");
        let failed = summary(&delivery(
            "RUN_FAILED",
            json!({ "error": { "why": "<!everyone>" } }),
        ));
        assert!(!failed.contains("<!"), "{failed}");
        let long = summary(&delivery(
            "RUN_FAILED",
            json!({ "error": "e".repeat(10_000) }),
        ));
        assert!(
            long.chars().count() < SLACK_VALUE_CHARS + 40,
            "{}",
            long.len()
        );
        // The link the deployment configured is the only link.
        let body: Value =
            serde_json::from_slice(&body(&d, NotificationFormat::Slack, Some("https://x/ui")))
                .unwrap();
        let text = body["text"].as_str().unwrap();
        assert_eq!(text.matches('<').count(), 1, "{text}");
        assert!(text.ends_with("<https://x/ui|Open the inbox>"), "{text}");
    }

    #[test]
    fn slack_messages_say_what_and_link_to_the_inbox() {
        let d = delivery(
            "INPUT_REQUIRED",
            json!({ "toolName": "send_email", "kind": "approval", "reason": "sends mail", "runName": "mailer" }),
        );
        let body: Value =
            serde_json::from_slice(&body(&d, NotificationFormat::Slack, Some("https://x/ui")))
                .unwrap();
        assert_eq!(
            body["text"],
            "Approval needed for `send_email` (agent mailer): sends mail\n<https://x/ui|Open the inbox>"
        );
        assert_eq!(body["blocks"][0]["text"]["type"], "mrkdwn");
        let cases = [
            (
                "INPUT_RESOLVED",
                json!({ "toolName": "t", "status": "approved", "answeredBy": "ann" }),
                "`t` was approved by ann",
            ),
            (
                "APPROVAL_RECORDED",
                json!({ "toolName": "t", "given": 1, "required": 2, "answeredBy": "ann" }),
                "`t`: 1 of 2 approvals (last by ann)",
            ),
            (
                "RUN_FAILED",
                json!({ "error": "boom" }),
                "A run failed: boom",
            ),
            ("RUN_COMPLETED", json!({}), "A run completed"),
            (
                "INPUT_REQUIRED",
                json!({ "kind": "ask" }),
                "Questions are waiting for an answer",
            ),
            (
                REMINDER_EVENT,
                json!({ "toolName": "t", "waited": "30m" }),
                "Still waiting after 30m: approval of `t`",
            ),
            (
                REMINDER_EVENT,
                json!({ "toolName": "render", "kind": "park", "reason": "rendering", "waited": "2h" }),
                "Still waiting after 2h: the job `render`: rendering",
            ),
        ];
        for (event, data, says) in cases {
            assert_eq!(summary(&delivery(event, data)), says);
        }
    }
}
