//! Question sets (intake and the `ask` tool): their validation, and the
//! resolution of a person's answers against the stored set.
//!
//! Both run on the server against what the run holds, never in a client: an
//! omitted question takes its defaults (and is recorded as defaulted), a
//! present empty array is an explicit "none", and anything that does not fit
//! the set is refused with every issue at once.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const MAX_QUESTIONS: usize = 20;
pub const MAX_OPTIONS: usize = 50;
pub const MAX_STRING_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuestionSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preamble: Option<String>,
    pub questions: Vec<Question>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    pub id: String,
    pub prompt: String,
    pub options: Vec<QuestionOption>,
    pub defaults: Vec<String>,
    #[serde(default)]
    pub multiple: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuestionOption {
    pub value: String,
    pub label: String,
}

/// One thing wrong with a question set or an answer: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Issue {
    /// A JSON pointer into the checked document (`/questions/0/defaults`).
    pub path: String,
    pub message: String,
}

/// A report names at most this many issues, the first found; a checker
/// stops after one more, which tells that there were more.
pub const MAX_ISSUES: usize = 20;

/// An issue's path and message are cut to this many characters: a message
/// may quote the value it is about, which can be as long as a body.
pub const MAX_ISSUE_CHARS: usize = 200;

impl Issue {
    /// An issue, its path and message cut to [`MAX_ISSUE_CHARS`].
    pub fn new(path: &str, message: &str) -> Issue {
        Issue {
            path: clip(path, MAX_ISSUE_CHARS),
            message: clip(message, MAX_ISSUE_CHARS),
        }
    }
}

/// `text` cut to at most `max` characters (`max` ≥ 1), an ellipsis the
/// last of a cut one.
pub fn clip(text: &str, max: usize) -> String {
    if text.char_indices().nth(max).is_none() {
        return text.to_owned();
    }
    let end = text
        .char_indices()
        .nth(max.saturating_sub(1))
        .map_or(text.len(), |(end, _)| end);
    format!("{}…", &text[..end])
}

/// The issues to report of `found`: at most [`MAX_ISSUES`] + 1, so a report
/// can say that more were found without anyone collecting them all.
pub fn first_issues(found: impl IntoIterator<Item = Issue>) -> Vec<Issue> {
    found.into_iter().take(MAX_ISSUES + 1).collect()
}

/// The issues a report shows (at most [`MAX_ISSUES`]), and whether more
/// were found.
pub fn shown_issues(issues: &[Issue]) -> (&[Issue], bool) {
    let shown = issues.len().min(MAX_ISSUES);
    (&issues[..shown], issues.len() > shown)
}

fn issue(path: impl AsRef<str>, message: impl AsRef<str>) -> Issue {
    Issue::new(path.as_ref(), message.as_ref())
}

/// Answers as resolved against the set: every question has its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    pub answers: BTreeMap<String, Vec<String>>,
    /// Ids of the questions that took their defaults because the reply
    /// left them out, in the set's order.
    pub defaulted: Vec<String>,
}

impl QuestionSet {
    /// Parses and validates a question set from JSON (the `ask` tool's
    /// input, or an intake from the agent file). All issues are reported.
    pub fn parse(value: &Value) -> Result<QuestionSet, Vec<Issue>> {
        let set: QuestionSet = serde_json::from_value(value.clone())
            .map_err(|e| vec![issue("", format!("not a question set: {e}"))])?;
        let issues = set.issues();
        if issues.is_empty() {
            Ok(set)
        } else {
            Err(first_issues(issues))
        }
    }

    /// What is wrong with this set (empty when it is valid).
    pub fn issues(&self) -> Vec<Issue> {
        let mut issues = Vec::new();
        let long = |s: &str| s.len() > MAX_STRING_BYTES;
        if self.preamble.as_deref().is_some_and(long) {
            issues.push(issue(
                "/preamble",
                format!("longer than {MAX_STRING_BYTES} bytes"),
            ));
        }
        if self.questions.is_empty() {
            issues.push(issue("/questions", "at least one question is required"));
        }
        if self.questions.len() > MAX_QUESTIONS {
            issues.push(issue(
                "/questions",
                format!("at most {MAX_QUESTIONS} questions"),
            ));
        }
        let mut ids = HashSet::new();
        for (i, q) in self.questions.iter().enumerate() {
            let at = |field: &str| format!("/questions/{i}{field}");
            if q.id.is_empty() {
                issues.push(issue(at("/id"), "must not be empty"));
            } else if !ids.insert(q.id.as_str()) {
                issues.push(issue(
                    at("/id"),
                    format!("duplicate question id {:?}", q.id),
                ));
            }
            for (field, text) in [("/id", &q.id), ("/prompt", &q.prompt)] {
                if long(text) {
                    issues.push(issue(
                        at(field),
                        format!("longer than {MAX_STRING_BYTES} bytes"),
                    ));
                }
            }
            if q.options.is_empty() {
                issues.push(issue(at("/options"), "at least one option is required"));
            }
            if q.options.len() > MAX_OPTIONS {
                issues.push(issue(
                    at("/options"),
                    format!("at most {MAX_OPTIONS} options"),
                ));
            }
            let values = option_issues(q, &at, &mut issues);
            if q.defaults.is_empty() {
                issues.push(issue(
                    at("/defaults"),
                    "pre-pick at least one default, so confirming is enough",
                ));
            } else if !q.multiple && q.defaults.len() != 1 {
                issues.push(issue(
                    at("/defaults"),
                    "a single-choice question takes exactly one default",
                ));
            }
            let mut seen = HashSet::new();
            for (j, d) in q.defaults.iter().enumerate() {
                if !values.contains(d.as_str()) {
                    issues.push(issue(
                        at(&format!("/defaults/{j}")),
                        format!("{d:?} is not one of the options"),
                    ));
                } else if !seen.insert(d.as_str()) {
                    issues.push(issue(
                        at(&format!("/defaults/{j}")),
                        format!("{d:?} repeats"),
                    ));
                }
            }
        }
        issues
    }

    /// Every question on its defaults, every id defaulted: a skip, or an
    /// approval of the pre-picked answers.
    pub fn defaults(&self) -> Resolved {
        Resolved {
            answers: self
                .questions
                .iter()
                .map(|q| (q.id.clone(), q.defaults.clone()))
                .collect(),
            defaulted: self.questions.iter().map(|q| q.id.clone()).collect(),
        }
    }

    /// Resolves `{ "<questionId>": ["value", …] }` against the set.
    pub fn resolve(&self, answers: &Value) -> Result<Resolved, Vec<Issue>> {
        let Some(given) = answers.as_object() else {
            return Err(vec![issue(
                "/answers",
                "must be an object of question ids to arrays of values",
            )]);
        };
        let mut issues = Vec::new();
        for id in given.keys() {
            if issues.len() > MAX_ISSUES {
                return Err(issues);
            }
            if !self.questions.iter().any(|q| &q.id == id) {
                issues.push(issue(pointer(id), format!("unknown question id {id:?}")));
            }
        }
        let mut resolved = Resolved {
            answers: BTreeMap::new(),
            defaulted: Vec::new(),
        };
        for q in &self.questions {
            let Some(value) = given.get(&q.id) else {
                resolved.answers.insert(q.id.clone(), q.defaults.clone());
                resolved.defaulted.push(q.id.clone());
                continue;
            };
            let path = pointer(&q.id);
            let Some(items) = value.as_array() else {
                issues.push(issue(path, "must be an array of option values"));
                continue;
            };
            let mut values = Vec::with_capacity(items.len().min(q.options.len()));
            for (j, item) in items.iter().enumerate() {
                if issues.len() > MAX_ISSUES {
                    return Err(issues);
                }
                match item.as_str() {
                    Some(v) if q.options.iter().any(|o| o.value == v) => {
                        if values.iter().any(|seen: &String| seen == v) {
                            issues.push(issue(format!("{path}/{j}"), format!("{v:?} repeats")));
                        } else {
                            values.push(v.to_owned());
                        }
                    }
                    Some(v) => issues.push(issue(
                        format!("{path}/{j}"),
                        format!("{v:?} is not one of the options"),
                    )),
                    None => issues.push(issue(format!("{path}/{j}"), "must be a string")),
                }
            }
            if !q.multiple && items.len() > 1 {
                issues.push(issue(
                    path,
                    "a single-choice question takes at most one value",
                ));
            }
            resolved.answers.insert(q.id.clone(), values);
        }
        if issues.is_empty() {
            Ok(resolved)
        } else {
            Err(issues)
        }
    }
}

/// `/answers/<id>` with the id escaped as a JSON pointer segment.
fn pointer(id: &str) -> String {
    format!("/answers/{}", id.replace('~', "~0").replace('/', "~1"))
}

/// The input schema of the built-in `ask` tool: `defaults` is required on
/// every question, so "confirming is enough" is a contract, not a hope.
pub fn ask_tool_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "required": ["questions"],
        "additionalProperties": false,
        "properties": {
            "preamble": { "type": "string", "maxLength": MAX_STRING_BYTES },
            "questions": {
                "type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS,
                "items": {
                    "type": "object",
                    "required": ["id", "prompt", "options", "defaults"],
                    "additionalProperties": false,
                    "properties": {
                        "id": { "type": "string", "minLength": 1 },
                        "prompt": { "type": "string" },
                        "multiple": { "type": "boolean" },
                        "options": {
                            "type": "array", "minItems": 1, "maxItems": MAX_OPTIONS,
                            "items": {
                                "type": "object",
                                "required": ["value", "label"],
                                "additionalProperties": false,
                                "properties": { "value": { "type": "string" }, "label": { "type": "string" } }
                            }
                        },
                        "defaults": { "type": "array", "minItems": 1, "items": { "type": "string" } }
                    }
                }
            }
        }
    })
}

/// The issues of `q`'s options (duplicate values, long texts); returns its
/// option values, which its defaults must be among.
fn option_issues<'q>(
    q: &'q Question,
    at: &dyn Fn(&str) -> String,
    issues: &mut Vec<Issue>,
) -> HashSet<&'q str> {
    let long = |s: &str| s.len() > MAX_STRING_BYTES;
    let mut values = HashSet::new();
    for (j, o) in q.options.iter().enumerate() {
        if !values.insert(o.value.as_str()) {
            issues.push(issue(
                at(&format!("/options/{j}/value")),
                format!("duplicate option value {:?}", o.value),
            ));
        }
        for (field, text) in [("value", &o.value), ("label", &o.label)] {
            if long(text) {
                issues.push(issue(
                    at(&format!("/options/{j}/{field}")),
                    format!("longer than {MAX_STRING_BYTES} bytes"),
                ));
            }
        }
    }
    values
}

#[cfg(test)]
mod tests;
