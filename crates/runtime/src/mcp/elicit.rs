//! A server's questions (MCP 2026-07-28 `input_required` with form-mode
//! elicitations) as a question set, and a person's reply as the
//! `inputResponses` the call is sent again with.
//!
//! Each property of a request's `requestedSchema` is one question, its id
//! the property's name (`KEY.NAME` when one round holds several requests):
//! a string with `enum` or `oneOf` is a single choice, an array of those a
//! multiple choice, a boolean a yes/no choice, another string a text
//! (`minLength`/`maxLength`), a number or an integer a number (`minimum`/
//! `maximum`); `required` and `default` carry over. What the state keeps is
//! how to turn the answers back into typed content, and the server's
//! `requestState`, which is echoed as it came.

use std::collections::BTreeMap;

use agentenkit_core::questions::{
    clip, link_issue, AnswerKind, Question, QuestionOption, QuestionSet,
};
use rmcp::model::{ElicitRequestParams, InputRequest, InputRequiredResult, InputResponses};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Number, Value};

use crate::tool::AskOutcome;

/// A prompt or preamble is cut to this many characters (a question's texts
/// are at most 4 KiB).
const MAX_TEXT_CHARS: usize = 1000;

/// What a round's questions keep to answer the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoundState {
    /// The server's `requestState`, echoed as it came.
    request_state: Option<String>,
    requests: Vec<Request>,
}

/// One elicitation of the round: its key in `inputRequests`, and its
/// fields (none for a URL-mode one, whose answer is only that it was done).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Request {
    key: String,
    fields: Vec<Field>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    url: bool,
}

/// One property: the question id it became and the JSON type it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Field {
    id: String,
    name: String,
    #[serde(rename = "type")]
    json_type: String,
}

/// The questions of `result`, and the state to answer them with; an error
/// the model reads when the server asks what a person cannot be shown.
pub(crate) fn questions(
    server: &str,
    result: &InputRequiredResult,
) -> Result<(QuestionSet, Value), String> {
    let requests = result.input_requests.clone().unwrap_or_default();
    let several = requests.len() > 1;
    let mut set = QuestionSet {
        preamble: None,
        questions: Vec::new(),
    };
    let mut messages = Vec::new();
    let mut state = RoundState {
        request_state: result.request_state.clone(),
        requests: Vec::new(),
    };
    for (key, request) in &requests {
        let order = property_order(request);
        let request = serde_json::to_value(request).map_err(|e| e.to_string())?;
        let params = &request["params"];
        match request["method"].as_str() {
            Some("elicitation/create") => {}
            other => {
                return Err(format!(
                    "mcp server {server} asked for {} (request {key:?}), which this client does not offer",
                    other.unwrap_or("an unknown request")
                ))
            }
        }
        match params["mode"].as_str().unwrap_or("form") {
            "form" => {}
            "url" => {
                set.questions.push(link_question(server, key, params)?);
                state.requests.push(Request {
                    key: key.clone(),
                    fields: Vec::new(),
                    url: true,
                });
                continue;
            }
            other => {
                return Err(format!(
                    "mcp server {server} asked for a {} elicitation (request {key:?}), which this client does not know",
                    clip(other, 40)
                ))
            }
        }
        if let Some(message) = params["message"].as_str().filter(|m| !m.is_empty()) {
            messages.push(message.to_owned());
        }
        let prefix = several.then_some(key.as_str());
        let (questions, fields) =
            form_questions(server, prefix, &order, &params["requestedSchema"])?;
        set.questions.extend(questions);
        state.requests.push(Request {
            key: key.clone(),
            fields,
            url: false,
        });
    }
    if !messages.is_empty() {
        set.preamble = Some(clip(&messages.join("\n\n"), MAX_TEXT_CHARS));
    }
    let state = serde_json::to_value(&state).map_err(|e| e.to_string())?;
    Ok((set, state))
}

/// A form's questions, in the server's `order`, each id the property's
/// name (`PREFIX.NAME` with a prefix), and the fields that answer it.
fn form_questions(
    server: &str,
    prefix: Option<&str>,
    order: &[String],
    schema: &Value,
) -> Result<(Vec<Question>, Vec<Field>), String> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut questions = Vec::new();
    let mut fields = Vec::new();
    let properties = order
        .iter()
        .filter_map(|name| Some((name, schema["properties"].get(name)?)));
    for (name, property) in properties {
        let id = match prefix {
            Some(key) => format!("{key}.{name}"),
            None => name.clone(),
        };
        let (question, json_type) =
            question(&id, name, property, required.contains(&name.as_str()))
                .map_err(|why| format!("mcp server {server} asked {name:?}: {why}"))?;
        questions.push(question);
        fields.push(Field {
            id,
            name: name.clone(),
            json_type,
        });
    }
    Ok((questions, fields))
}

/// A URL-mode elicitation as a question: the server's message, the page
/// as the question's link, and one option, Done, which the person picks
/// once they have been there (required: nothing is pre-picked). A link
/// that is not an `http(s)` URL is not shown to anyone.
fn link_question(server: &str, key: &str, params: &Value) -> Result<Question, String> {
    let url = params["url"].as_str().unwrap_or_default();
    if let Some(wrong) = link_issue(url) {
        return Err(format!(
            "mcp server {server} asked the person to open {:?} (request {key:?}), which {wrong}",
            clip(url, 200)
        ));
    }
    let prompt = params["message"]
        .as_str()
        .filter(|m| !m.is_empty())
        .map_or_else(
            || "Open the page, then say when you are done.".to_owned(),
            |m| clip(m, MAX_TEXT_CHARS),
        );
    let mut question = Question::choice(key, prompt, vec![option("done", "Done")], vec![], false);
    question.required = true;
    question.link = Some(url.to_owned());
    Ok(question)
}

/// The properties of a form in the order the server wrote them (a JSON
/// object here keeps its keys sorted; the SDK keeps the wire order).
fn property_order(request: &InputRequest) -> Vec<String> {
    match request {
        InputRequest::Elicitation(elicit) => match &elicit.params {
            ElicitRequestParams::FormElicitationParams {
                requested_schema, ..
            } => requested_schema
                .property_order
                .clone()
                .unwrap_or_else(|| requested_schema.properties.keys().cloned().collect()),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// One property as a question, and the JSON type its answer is sent as.
fn question(
    id: &str,
    name: &str,
    property: &Value,
    required: bool,
) -> Result<(Question, String), String> {
    let title = property["title"].as_str().unwrap_or(name);
    let prompt = match property["description"].as_str() {
        Some(description) if !description.is_empty() => format!("{title}\n{description}"),
        _ => title.to_owned(),
    };
    let mut q = Question::choice(id, clip(&prompt, MAX_TEXT_CHARS), vec![], vec![], false);
    q.required = required;
    let json_type = property["type"].as_str().unwrap_or("").to_owned();
    let default = &property["default"];
    match json_type.as_str() {
        "boolean" => {
            q.options = vec![option("true", "Yes"), option("false", "No")];
            q.defaults = default
                .as_bool()
                .map(|b| vec![b.to_string()])
                .unwrap_or_default();
        }
        "string" if property.get("enum").is_some() || property.get("oneOf").is_some() => {
            q.options = options(property)?;
            q.defaults = default
                .as_str()
                .map(|d| vec![d.to_owned()])
                .unwrap_or_default();
        }
        "array" => {
            q.options = options(&property["items"])?;
            q.multiple = true;
            q.defaults = default
                .as_array()
                .map(|d| {
                    d.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            q.required |= property["minItems"].as_u64().is_some_and(|n| n > 0);
        }
        "string" => {
            q.kind = AnswerKind::Text;
            q.min = property["minLength"].as_u64().map(Number::from);
            q.max = property["maxLength"].as_u64().map(Number::from);
            q.defaults = default
                .as_str()
                .map(|d| vec![d.to_owned()])
                .unwrap_or_default();
        }
        "number" | "integer" => {
            q.kind = if json_type == "integer" {
                AnswerKind::Integer
            } else {
                AnswerKind::Number
            };
            q.min = property["minimum"].as_number().cloned();
            q.max = property["maximum"].as_number().cloned();
            q.defaults = default
                .as_number()
                .map(|n| vec![n.to_string()])
                .unwrap_or_default();
        }
        other => return Err(format!("a property of type {other:?} cannot be asked")),
    }
    // Left out of the form when the person leaves it empty: no client
    // pre-picks what the server did not.
    q.optional = !q.required && q.defaults.is_empty();
    Ok((q, json_type))
}

fn option(value: &str, label: &str) -> QuestionOption {
    QuestionOption {
        value: value.to_owned(),
        label: label.to_owned(),
    }
}

/// The options of a string schema: `enum` (labelled by `enumNames` when
/// given), or `oneOf`/`anyOf` of `{const, title}`.
fn options(schema: &Value) -> Result<Vec<QuestionOption>, String> {
    if let Some(values) = schema["enum"].as_array() {
        let names = schema["enumNames"].as_array();
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let value = v.as_str().ok_or("an enum value is not a string")?;
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .unwrap_or(value);
                Ok(option(value, label))
            })
            .collect();
    }
    let choices = schema["oneOf"]
        .as_array()
        .or_else(|| schema["anyOf"].as_array())
        .ok_or("a choice without enum, oneOf or anyOf")?;
    choices
        .iter()
        .map(|c| {
            let value = c["const"]
                .as_str()
                .ok_or("a choice without a string const")?;
            Ok(option(value, c["title"].as_str().unwrap_or(value)))
        })
        .collect()
}

/// The `inputResponses` and `requestState` a round's reply is sent with:
/// accept with the answers as typed content, decline for a skip, cancel
/// when nobody answered in time.
pub(crate) fn responses(
    state: &Value,
    outcome: &AskOutcome,
) -> Result<(InputResponses, Option<String>), String> {
    let state: RoundState = serde_json::from_value(state.clone())
        .map_err(|e| format!("the questions' state is unreadable: {e}"))?;
    let mut responses = BTreeMap::new();
    for request in &state.requests {
        let response = match outcome {
            // A page the person opened and said they were done with.
            AskOutcome::Answered(_) if request.url => json!({ "action": "accept" }),
            AskOutcome::Answered(answers) => {
                let mut content = Map::new();
                for field in &request.fields {
                    let values = answers.get(&field.id).map(Vec::as_slice).unwrap_or(&[]);
                    if let Some(value) = typed(&field.json_type, values) {
                        content.insert(field.name.clone(), value);
                    }
                }
                json!({ "action": "accept", "content": content })
            }
            AskOutcome::Skipped => json!({ "action": "decline" }),
            // A wake-up answers a wait, never questions: as good as
            // nobody answering.
            AskOutcome::Expired | AskOutcome::Woke(_) => json!({ "action": "cancel" }),
        };
        responses.insert(request.key.clone(), response);
    }
    Ok((responses, state.request_state))
}

/// An answer's values as the JSON type the server asked for; `None` when
/// the question was left empty (an optional one, unanswered).
fn typed(json_type: &str, values: &[String]) -> Option<Value> {
    if json_type == "array" {
        return Some(json!(values));
    }
    let value = values.first()?;
    Some(match json_type {
        "boolean" => Value::Bool(value == "true"),
        "integer" => value.parse::<i64>().map(Value::from).ok()?,
        "number" => serde_json::from_str::<Number>(value)
            .ok()
            .or_else(|| value.parse::<f64>().ok().and_then(Number::from_f64))
            .map(Value::Number)?,
        _ => Value::String(value.clone()),
    })
}

#[cfg(test)]
mod tests;
