use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn input_required(requests: Value, state: Option<&str>) -> InputRequiredResult {
    serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": state,
    }))
    .expect("an input_required result")
}

fn form(message: &str, properties: Value, required: Value) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": { "type": "object", "properties": properties, "required": required },
        },
    })
}

/// Every kind of property the spec's forms have, as the person sees it.
#[test]
fn a_form_becomes_a_question_set_of_every_kind() {
    let asked = input_required(
        json!({ "details": form("Escalating T-1.", json!({
            "team": { "type": "string", "title": "Team", "oneOf": [
                { "const": "ops", "title": "Operations" }, { "const": "dev", "title": "Development" } ] },
            "legacy": { "type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"], "default": "b" },
            "reason": { "type": "string", "title": "Why?", "description": "One line.", "minLength": 3, "maxLength": 200 },
            "hours": { "type": "integer", "minimum": 1, "maximum": 72, "default": 24 },
            "budget": { "type": "number", "minimum": 0.5 },
            "page": { "type": "boolean", "default": true },
            "quiet": { "type": "boolean" },
            "tags": { "type": "array", "items": { "anyOf": [
                { "const": "printer", "title": "Printer" }, { "const": "urgent", "title": "Urgent" } ] },
                "default": ["printer"] },
        }), json!(["team", "reason"])) }),
        Some("sealed-state"),
    );
    let (set, state) = questions("tickets", &asked).unwrap();
    assert!(set.issues().is_empty(), "{:?}", set.issues());
    assert_eq!(set.preamble.as_deref(), Some("Escalating T-1."));
    let q = |id: &str| set.questions.iter().find(|q| q.id == id).unwrap();
    assert_eq!(q("team").prompt, "Team");
    assert_eq!(q("team").options[0].label, "Operations");
    assert!(q("team").required && q("team").defaults.is_empty());
    assert_eq!(q("legacy").options[1].label, "B");
    assert_eq!(q("legacy").defaults, ["b"]);
    assert_eq!(q("reason").kind, AnswerKind::Text);
    assert_eq!(q("reason").prompt, "Why?\nOne line.");
    assert_eq!(q("reason").min, Some(Number::from(3)));
    assert_eq!(q("hours").kind, AnswerKind::Integer);
    assert_eq!(q("hours").defaults, ["24"]);
    assert_eq!(q("budget").kind, AnswerKind::Number);
    assert!(!q("budget").required && q("budget").defaults.is_empty());
    assert_eq!(q("page").defaults, ["true"]);
    // Optional without a default: nothing is pre-picked for the person.
    assert!(q("quiet").optional && q("quiet").defaults.is_empty());
    assert!(q("tags").multiple);
    assert_eq!(state["requestState"], "sealed-state");
}

/// The reply goes back typed, as the schema asked, with the state as it
/// came; a skip declines and an expiry cancels every request of the round.
#[test]
fn a_reply_is_sent_back_as_typed_input_responses() {
    let asked = input_required(
        json!({ "details": form("", json!({
            "team": { "type": "string", "enum": ["ops", "dev"] },
            "reason": { "type": "string" },
            "hours": { "type": "integer" },
            "budget": { "type": "number" },
            "page": { "type": "boolean", "default": false },
            "tags": { "type": "array", "items": { "type": "string", "enum": ["a", "b"] }, "default": [] },
        }), json!(["team"])) }),
        Some("s1"),
    );
    let (set, state) = questions("tickets", &asked).unwrap();
    let resolved = set
        .resolve(
            &json!({ "team": ["dev"], "reason": ["it burns"], "hours": ["3"],
                          "budget": ["12.5"], "page": ["true"], "tags": ["b", "a"] }),
        )
        .unwrap();
    let (responses, request_state) =
        responses(&state, &AskOutcome::Answered(resolved.answers)).unwrap();
    assert_eq!(request_state.as_deref(), Some("s1"));
    assert_eq!(
        responses["details"],
        json!({ "action": "accept", "content": {
            "team": "dev", "reason": "it burns", "hours": 3, "budget": 12.5,
            "page": true, "tags": ["b", "a"] } })
    );
    // Optional questions left empty are left out.
    let resolved = set.resolve(&json!({ "team": ["ops"] })).unwrap();
    let (left_out, _) = super::responses(&state, &AskOutcome::Answered(resolved.answers)).unwrap();
    assert_eq!(
        left_out["details"]["content"],
        json!({ "team": "ops", "page": false, "tags": [] })
    );
    let (skipped, _) = super::responses(&state, &AskOutcome::Skipped).unwrap();
    assert_eq!(skipped["details"], json!({ "action": "decline" }));
    let (expired, _) = super::responses(&state, &AskOutcome::Expired).unwrap();
    assert_eq!(expired["details"], json!({ "action": "cancel" }));
}

/// The questions come in the order the server wrote its properties, not
/// sorted.
#[test]
fn questions_keep_the_servers_order() {
    let asked: InputRequiredResult = serde_json::from_str(
        r#"{ "resultType": "input_required", "inputRequests": { "x": {
              "method": "elicitation/create", "params": { "mode": "form", "message": "m",
                "requestedSchema": { "type": "object", "properties": {
                  "zeta": { "type": "string" }, "alpha": { "type": "boolean", "default": true },
                  "mid": { "type": "integer" } } } } } } }"#,
    )
    .unwrap();
    let (set, _) = questions("s", &asked).unwrap();
    let ids: Vec<&str> = set.questions.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["zeta", "alpha", "mid"]);
}

/// Several requests in one round: ids say which each question belongs to,
/// and each request gets its own response.
#[test]
fn several_requests_in_a_round_keep_their_questions_apart() {
    let asked = input_required(
        json!({
            "a": form("First.", json!({ "ok": { "type": "boolean", "default": true } }), json!([])),
            "b": form("Second.", json!({ "ok": { "type": "boolean", "default": false } }), json!([])),
        }),
        None,
    );
    let (set, state) = questions("s", &asked).unwrap();
    let ids: Vec<&str> = set.questions.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["a.ok", "b.ok"]);
    assert_eq!(set.preamble.as_deref(), Some("First.\n\nSecond."));
    let answers = BTreeMap::from([
        ("a.ok".to_owned(), vec!["false".to_owned()]),
        ("b.ok".to_owned(), vec!["true".to_owned()]),
    ]);
    let (responses, request_state) = responses(&state, &AskOutcome::Answered(answers)).unwrap();
    assert_eq!(request_state, None);
    assert_eq!(responses["a"]["content"], json!({ "ok": false }));
    assert_eq!(responses["b"]["content"], json!({ "ok": true }));
}

/// What a person cannot be asked is a failure the model reads, naming the
/// server and what it asked.
#[test]
fn what_cannot_be_asked_is_refused_with_a_reason() {
    // (A property that is not a primitive never gets here: the SDK refuses
    // the whole answer as malformed, a failure of the call.)
    let url = input_required(
        json!({ "x": { "method": "elicitation/create", "params": {
            "mode": "url", "message": "Sign in", "url": "javascript:alert(1)", "elicitationId": "e1" } } }),
        None,
    );
    let refused = questions("tickets", &url).unwrap_err();
    assert!(
        refused.contains("javascript:alert(1)") && refused.contains("http:// or https://"),
        "{refused}"
    );
    let roots = input_required(json!({ "r": { "method": "roots/list" } }), None);
    assert!(questions("tickets", &roots)
        .unwrap_err()
        .contains("roots/list"));
}

/// A URL-mode elicitation is a link the person opens, then confirms: one
/// required choice, Done, nothing pre-picked; confirmed, it is an accept
/// without content, beside a form's typed one.
#[test]
fn a_url_elicitation_is_a_link_to_open_then_confirm() {
    let asked = input_required(
        json!({
            "signin": { "method": "elicitation/create", "params": {
                "mode": "url", "message": "Sign in to the ticket system.",
                "url": "https://sso.example.com/start?s=1", "elicitationId": "e1" } },
            "note": form("And a note.", json!({ "text": { "type": "string" } }), json!([])),
        }),
        Some("st"),
    );
    let (set, state) = questions("tickets", &asked).unwrap();
    let link = set.questions.iter().find(|q| q.id == "signin").unwrap();
    assert_eq!(
        link.link.as_deref(),
        Some("https://sso.example.com/start?s=1")
    );
    assert_eq!(link.prompt, "Sign in to the ticket system.");
    assert!(link.required && link.defaults.is_empty());
    assert_eq!(link.options.len(), 1);
    assert!(set.issues().is_empty(), "{:?}", set.issues());
    // The form's message is the preamble; the link's is its prompt.
    assert_eq!(set.preamble.as_deref(), Some("And a note."));

    let answers = BTreeMap::from([
        ("signin".to_owned(), vec!["done".to_owned()]),
        ("note.text".to_owned(), vec!["hi".to_owned()]),
    ]);
    let (accepted, request_state) = responses(&state, &AskOutcome::Answered(answers)).unwrap();
    assert_eq!(request_state.as_deref(), Some("st"));
    assert_eq!(
        serde_json::to_value(&accepted["signin"]).unwrap(),
        json!({ "action": "accept" })
    );
    assert_eq!(accepted["note"]["content"], json!({ "text": "hi" }));
    let (skipped, _) = responses(&state, &AskOutcome::Skipped).unwrap();
    assert_eq!(
        serde_json::to_value(&skipped["signin"]).unwrap(),
        json!({ "action": "decline" })
    );
}
