//! Question sets (intake, the `ask` tool, and a tool's own questions such
//! as an MCP server's): their validation, and the resolution of a person's
//! answers against the stored set.
//!
//! A question is a choice among options (the seeds' kind, and the default),
//! or asks for a text, a number or an integer. Answers keep one shape for
//! every kind: `{ "<questionId>": ["value", …] }`, a typed answer as its one
//! string (`["42"]`), checked against the question's bounds.
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
    /// A choice question's options; none (`[]`) for the other kinds.
    pub options: Vec<QuestionOption>,
    pub defaults: Vec<String>,
    #[serde(default)]
    pub multiple: bool,
    /// What the answer is: a choice (omitted), a text, a number.
    #[serde(default, skip_serializing_if = "AnswerKind::is_choice")]
    pub kind: AnswerKind,
    /// The person must answer it: leaving it out is refused rather than
    /// taking its defaults, and a choice question may then pre-pick none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// The person may leave it empty: a choice question then needs no
    /// default (a server's form may ask so; the model's `ask` pre-picks).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Bounds of a text's length in characters, or of a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub min: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub max: Option<serde_json::Number>,
    /// A page the person opens before answering (an MCP server's URL-mode
    /// elicitation: a sign-in, a payment): shown as a link with its whole
    /// address. An `http(s)` URL of at most [`MAX_LINK_BYTES`]; the
    /// model's `ask` cannot set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

mod link;
pub use link::{link_issue, MAX_LINK_BYTES};

/// What a question's answer is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AnswerKind {
    /// One (or, `multiple`, several) of the options.
    #[default]
    Choice,
    /// Free text, at most [`MAX_STRING_BYTES`].
    Text,
    /// A finite decimal number.
    Number,
    /// A whole number.
    Integer,
}

impl AnswerKind {
    pub fn is_choice(&self) -> bool {
        *self == AnswerKind::Choice
    }

    /// A text or a number: answered by typing, not by picking.
    pub fn is_typed(&self) -> bool {
        !self.is_choice()
    }
}

impl Question {
    /// A choice question with no bounds, as the seeds have them.
    pub fn choice(
        id: impl Into<String>,
        prompt: impl Into<String>,
        options: Vec<QuestionOption>,
        defaults: Vec<String>,
        multiple: bool,
    ) -> Question {
        Question {
            id: id.into(),
            prompt: prompt.into(),
            options,
            defaults,
            multiple,
            kind: AnswerKind::Choice,
            required: false,
            optional: false,
            min: None,
            max: None,
            link: None,
        }
    }

    /// Why `value` cannot be one of this question's answer values (not an
    /// option; not a number, or out of bounds), if it cannot: what a client
    /// can tell a person before it sends the answer.
    pub fn value_issue(&self, value: &str) -> Option<String> {
        let bound = |n: &Option<serde_json::Number>| n.as_ref().and_then(|n| n.as_f64());
        let (min, max) = (bound(&self.min), bound(&self.max));
        let measured = match self.kind {
            AnswerKind::Choice => {
                return (!self.options.iter().any(|o| o.value == value))
                    .then(|| format!("{value:?} is not one of the options"))
            }
            AnswerKind::Text => {
                if value.len() > MAX_STRING_BYTES {
                    return Some(format!("longer than {MAX_STRING_BYTES} bytes"));
                }
                value.chars().count() as f64
            }
            AnswerKind::Number => match value.trim().parse::<f64>() {
                Ok(n) if n.is_finite() && value.trim() == value => n,
                _ => {
                    return Some(format!(
                        "{} is not a number",
                        clip(&format!("{value:?}"), 40)
                    ))
                }
            },
            AnswerKind::Integer => match value.parse::<i64>() {
                Ok(n) => n as f64,
                Err(_) => {
                    return Some(format!(
                        "{} is not a whole number",
                        clip(&format!("{value:?}"), 40)
                    ))
                }
            },
        };
        let what = if self.kind == AnswerKind::Text {
            "characters"
        } else {
            ""
        };
        match (min, max) {
            (Some(min), _) if measured < min => {
                Some(format!("at least {min} {what}").trim_end().to_owned())
            }
            (_, Some(max)) if measured > max => {
                Some(format!("at most {max} {what}").trim_end().to_owned())
            }
            _ => None,
        }
    }
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
            if let Some(wrong) = q.link.as_deref().and_then(link_issue) {
                issues.push(issue(at("/link"), wrong));
            }
            if q.required && q.optional {
                issues.push(issue(
                    at("/optional"),
                    "a question is required or optional, not both",
                ));
            }
            match q.kind {
                AnswerKind::Choice => choice_issues(q, &at, &mut issues),
                _ => typed_issues(q, &at, &mut issues),
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
            let path = pointer(&q.id);
            let Some(value) = given.get(&q.id) else {
                if q.required && q.defaults.is_empty() {
                    issues.push(issue(path, "an answer is required"));
                    continue;
                }
                resolved.answers.insert(q.id.clone(), q.defaults.clone());
                resolved.defaulted.push(q.id.clone());
                continue;
            };
            let Some(items) = value.as_array() else {
                let what = match q.kind {
                    AnswerKind::Choice => "must be an array of option values",
                    _ => "must be an array of one value",
                };
                issues.push(issue(path, what));
                continue;
            };
            let mut values = Vec::with_capacity(items.len().min(q.options.len().max(1)));
            for (j, item) in items.iter().enumerate() {
                if issues.len() > MAX_ISSUES {
                    return Err(issues);
                }
                match item.as_str() {
                    Some(v) => match q.value_issue(v) {
                        Some(wrong) => issues.push(issue(format!("{path}/{j}"), wrong)),
                        None if values.iter().any(|seen: &String| seen == v) => {
                            issues.push(issue(format!("{path}/{j}"), format!("{v:?} repeats")))
                        }
                        None => values.push(v.to_owned()),
                    },
                    None => issues.push(issue(format!("{path}/{j}"), "must be a string")),
                }
            }
            if !q.multiple && items.len() > 1 {
                let what = match q.kind {
                    AnswerKind::Choice => "a single-choice question takes at most one value",
                    _ => "takes at most one value",
                };
                issues.push(issue(&path, what));
            }
            if q.required && items.is_empty() {
                issues.push(issue(&path, "an answer is required"));
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

/// The issues of a choice question: its options, and defaults among them
/// (at least one, so confirming is enough, unless it is required or
/// optional).
fn choice_issues(q: &Question, at: &dyn Fn(&str) -> String, issues: &mut Vec<Issue>) {
    if q.options.is_empty() {
        issues.push(issue(at("/options"), "at least one option is required"));
    }
    if q.options.len() > MAX_OPTIONS {
        issues.push(issue(
            at("/options"),
            format!("at most {MAX_OPTIONS} options"),
        ));
    }
    let values = option_issues(q, at, issues);
    if q.defaults.is_empty() && !q.required && !q.optional {
        issues.push(issue(
            at("/defaults"),
            "pre-pick at least one default, so confirming is enough",
        ));
    } else if !q.multiple && q.defaults.len() > 1 {
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
    if q.min.is_some() || q.max.is_some() {
        issues.push(issue(at("/min"), "only a text or a number has bounds"));
    }
}

/// The issues of a text or number question: no options, one value at
/// most, a default that fits, bounds in order.
fn typed_issues(q: &Question, at: &dyn Fn(&str) -> String, issues: &mut Vec<Issue>) {
    let kind = match q.kind {
        AnswerKind::Text => "text",
        AnswerKind::Number => "number",
        _ => "integer",
    };
    if !q.options.is_empty() {
        issues.push(issue(
            at("/options"),
            format!("a {kind} question has no options"),
        ));
    }
    if q.multiple {
        issues.push(issue(
            at("/multiple"),
            format!("a {kind} question takes one value"),
        ));
    }
    if q.defaults.len() > 1 {
        issues.push(issue(at("/defaults"), "at most one default"));
    }
    for (j, d) in q.defaults.iter().enumerate() {
        if let Some(wrong) = q.value_issue(d) {
            issues.push(issue(at(&format!("/defaults/{j}")), wrong));
        }
    }
    let bounds = [("/min", &q.min), ("/max", &q.max)];
    for (field, bound) in bounds {
        let Some(n) = bound else { continue };
        let whole = n.as_u64().is_some();
        if q.kind == AnswerKind::Text && !whole {
            issues.push(issue(at(field), "a length is a whole number of at least 0"));
        }
        if q.kind == AnswerKind::Integer && n.as_i64().is_none() && !whole {
            issues.push(issue(at(field), "an integer's bound is a whole number"));
        }
    }
    if let (Some(min), Some(max)) = (
        q.min.as_ref().and_then(|n| n.as_f64()),
        q.max.as_ref().and_then(|n| n.as_f64()),
    ) {
        if min > max {
            issues.push(issue(at("/max"), "less than min"));
        }
    }
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
