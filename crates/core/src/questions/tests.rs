use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn scope_set() -> QuestionSet {
    QuestionSet::parse(&json!({
        "preamble": "Two questions before I start.",
        "questions": [
            { "id": "scope", "prompt": "How wide?", "options": [
                { "value": "module", "label": "This module only" },
                { "value": "repo", "label": "The whole repository" } ], "defaults": ["module"] },
            { "id": "langs", "prompt": "Which languages?", "multiple": true, "options": [
                { "value": "rust", "label": "Rust" }, { "value": "go", "label": "Go" },
                { "value": "py", "label": "Python" } ], "defaults": ["rust", "go"] }
        ]
    }))
    .expect("valid")
}

fn paths(issues: &[Issue]) -> Vec<&str> {
    issues.iter().map(|i| i.path.as_str()).collect()
}

#[test]
fn omitted_questions_take_their_defaults_and_are_recorded_as_defaulted() {
    let resolved = scope_set().resolve(&json!({ "scope": ["repo"] })).unwrap();
    assert_eq!(resolved.answers["scope"], ["repo"]);
    assert_eq!(resolved.answers["langs"], ["rust", "go"]);
    assert_eq!(resolved.defaulted, ["langs"]);
}

#[test]
fn a_present_empty_array_is_an_explicit_none() {
    let resolved = scope_set()
        .resolve(&json!({ "langs": [], "scope": [] }))
        .unwrap();
    assert!(resolved.answers["langs"].is_empty());
    assert!(resolved.answers["scope"].is_empty());
    assert!(resolved.defaulted.is_empty());
}

#[test]
fn pressing_enter_and_picking_exactly_the_defaults_resolve_to_the_same_values() {
    let set = scope_set();
    let blank = set.resolve(&json!({})).unwrap();
    let picked = set
        .resolve(&json!({ "scope": ["module"], "langs": ["rust", "go"] }))
        .unwrap();
    assert_eq!(blank.answers, picked.answers);
    assert_eq!(blank.defaulted, ["scope", "langs"]);
    assert!(
        picked.defaulted.is_empty(),
        "who touched what stays visible"
    );
    assert_eq!(set.defaults(), blank);
}

#[test]
fn answers_that_do_not_fit_are_refused_with_every_issue() {
    let set = scope_set();
    let issues = set
        .resolve(&json!({ "nope": ["x"], "scope": ["module", "repo"], "langs": ["rust", "cobol", 7, "rust"] }))
        .unwrap_err();
    assert_eq!(
        paths(&issues),
        [
            "/answers/nope",
            "/answers/scope",
            "/answers/langs/1",
            "/answers/langs/2",
            "/answers/langs/3"
        ]
    );
    assert!(set.resolve(&json!(["scope"])).is_err());
    assert_eq!(
        paths(&set.resolve(&json!({ "scope": "repo" })).unwrap_err()),
        ["/answers/scope"]
    );
    assert_eq!(
        paths(&set.resolve(&json!({ "a/b~": [] })).unwrap_err()),
        ["/answers/a~1b~0"],
        "ids are escaped as JSON pointer segments"
    );
}

#[test]
fn invalid_sets_say_where_and_what() {
    let cases = [
        (json!({ "questions": [] }), vec!["/questions"]),
        (
            json!({ "questions": [{ "id": "", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["a"] }] }),
            vec!["/questions/0/id"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [], "defaults": ["a"] }] }),
            vec!["/questions/0/options", "/questions/0/defaults/0"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": [] }] }),
            vec!["/questions/0/defaults"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}], "defaults": ["a", "b"] }] }),
            vec!["/questions/0/defaults"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}, {"value": "a", "label": "B"}], "defaults": ["a"] }] }),
            vec!["/questions/0/options/1/value"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["z"] }] }),
            vec!["/questions/0/defaults/0"],
        ),
        (
            json!({ "questions": [
            { "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["a"] },
            { "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["a"] }] }),
            vec!["/questions/1/id"],
        ),
        (
            json!({ "questions": [{ "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}] }] }),
            vec![""],
        ),
        (json!("ask me"), vec![""]),
    ];
    for (set, expected) in cases {
        let issues = QuestionSet::parse(&set).unwrap_err();
        assert_eq!(paths(&issues), expected, "{set}");
    }
    let long = "x".repeat(MAX_STRING_BYTES + 1);
    let issues = QuestionSet::parse(&json!({ "preamble": long, "questions": [
        { "id": "q", "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["a"] }] }))
    .unwrap_err();
    assert_eq!(paths(&issues), ["/preamble"]);
    let many: Vec<_> = (0..=MAX_QUESTIONS)
        .map(|i| json!({ "id": format!("q{i}"), "prompt": "p", "options": [{"value": "a", "label": "A"}], "defaults": ["a"] }))
        .collect();
    assert_eq!(
        paths(&QuestionSet::parse(&json!({ "questions": many })).unwrap_err()),
        ["/questions"]
    );
}

#[test]
fn the_ask_schema_requires_defaults_on_every_question() {
    let schema = ask_tool_schema();
    let item = &schema["properties"]["questions"]["items"];
    assert!(item["required"]
        .as_array()
        .unwrap()
        .contains(&json!("defaults")));
    assert_eq!(item["properties"]["defaults"]["minItems"], 1);
}

fn arb_set() -> impl Strategy<Value = QuestionSet> {
    let question = (
        1usize..6,
        any::<bool>(),
        prop::collection::vec(any::<prop::sample::Index>(), 1..4),
    )
        .prop_map(|(n_options, multiple, picks)| {
            let options: Vec<QuestionOption> = (0..n_options)
                .map(|i| QuestionOption {
                    value: format!("v{i}"),
                    label: format!("Option {i}"),
                })
                .collect();
            let mut defaults: Vec<String> = picks
                .iter()
                .map(|p| options[p.index(n_options)].value.clone())
                .collect();
            defaults.sort();
            defaults.dedup();
            if !multiple {
                defaults.truncate(1);
            }
            (options, defaults, multiple)
        });
    prop::collection::vec(question, 1..8).prop_map(|qs| QuestionSet {
        preamble: None,
        questions: qs
            .into_iter()
            .enumerate()
            .map(|(i, (options, defaults, multiple))| {
                Question::choice(
                    format!("q{i}"),
                    format!("Question {i}?"),
                    options,
                    defaults,
                    multiple,
                )
            })
            .collect(),
    })
}

/// A body of countless wrong answers: the check stops one past the cap,
/// each message quoting a long value cut short.
#[test]
fn countless_wrong_answers_are_reported_as_the_first_twenty_and_one_more() {
    let unknown: serde_json::Map<String, Value> =
        (0..10_000).map(|i| (format!("q{i}"), json!([]))).collect();
    let issues = scope_set().resolve(&Value::Object(unknown)).unwrap_err();
    assert_eq!(issues.len(), MAX_ISSUES + 1);
    let values: Vec<String> = (0..10_000)
        .map(|i| format!("{i}{}", "v".repeat(1000)))
        .collect();
    let issues = scope_set()
        .resolve(&json!({ "langs": values }))
        .unwrap_err();
    assert_eq!(issues.len(), MAX_ISSUES + 1);
    assert!(issues
        .iter()
        .all(|issue| issue.message.chars().count() <= MAX_ISSUE_CHARS));
    let (shown, more) = shown_issues(&issues);
    assert_eq!((shown.len(), more), (MAX_ISSUES, true));
    let (shown, more) = shown_issues(&issues[..3]);
    assert_eq!((shown.len(), more), (3, false));
}

proptest! {
    /// A clipped text is a prefix of the text (then an ellipsis) of at most
    /// `max` characters, and a short text is kept whole.
    #[test]
    fn clip_keeps_a_prefix_of_at_most_max_characters(text in "\\PC{0,40}", max in 1usize..30) {
        let clipped = clip(&text, max);
        prop_assert!(clipped.chars().count() <= max);
        if text.chars().count() <= max {
            prop_assert_eq!(&clipped, &text);
        } else {
            let kept = clipped.strip_suffix('…').expect("an ellipsis");
            prop_assert!(text.starts_with(kept));
            prop_assert_eq!(kept.chars().count(), max - 1);
        }
    }

    /// Every generated valid set validates, survives a JSON round trip, and
    /// its defaults resolve: an empty reply equals the defaults, all defaulted.
    #[test]
    fn valid_sets_validate_and_default(set in arb_set()) {
        prop_assert!(set.issues().is_empty(), "{:?}", set.issues());
        let parsed = QuestionSet::parse(&serde_json::to_value(&set).unwrap()).unwrap();
        prop_assert_eq!(&parsed, &set);
        prop_assert_eq!(set.resolve(&json!({})).unwrap(), set.defaults());
    }

    /// A reply choosing option values per question resolves to exactly
    /// those values; the others default; nothing else is invented.
    #[test]
    fn chosen_answers_resolve_to_themselves(
        set in arb_set(),
        choices in prop::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 8),
    ) {
        let mut reply = serde_json::Map::new();
        let mut expected_defaulted = Vec::new();
        for (q, (answer, pick)) in set.questions.iter().zip(&choices) {
            if *answer {
                reply.insert(q.id.clone(), json!([q.options[pick.index(q.options.len())].value]));
            } else {
                expected_defaulted.push(q.id.clone());
            }
        }
        let resolved = set.resolve(&Value::Object(reply.clone())).unwrap();
        prop_assert_eq!(&resolved.defaulted, &expected_defaulted);
        for q in &set.questions {
            let expected: Vec<String> = match reply.get(&q.id) {
                Some(v) => serde_json::from_value(v.clone()).unwrap(),
                None => q.defaults.clone(),
            };
            prop_assert_eq!(&resolved.answers[&q.id], &expected);
        }
    }

    /// Arbitrary JSON never panics the resolver or the validator, and a
    /// refused reply always says where.
    #[test]
    fn arbitrary_replies_are_resolved_or_refused_with_paths(set in arb_set(), reply in arb_json()) {
        if let Err(issues) = set.resolve(&reply) {
            prop_assert!(!issues.is_empty());
            prop_assert!(issues.iter().all(|i| i.path.starts_with("/answers")));
        }
        let _ = QuestionSet::parse(&reply);
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "[a-z0-9]{0,6}".prop_map(Value::from),
        prop::sample::select(vec!["v0", "v1", "v2", "q0", "q1"]).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["q0", "q1", "q2", "x"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A server's form: a text, a number, an integer, and a required choice
/// with no default.
fn typed_set() -> QuestionSet {
    QuestionSet::parse(&json!({
        "questions": [
            { "id": "name", "prompt": "Your name?", "kind": "text", "required": true, "min": 2, "max": 10, "options": [], "defaults": [] },
            { "id": "budget", "prompt": "Budget?", "kind": "number", "min": 0.5, "max": 100, "defaults": ["10"], "options": [] },
            { "id": "seats", "prompt": "Seats?", "kind": "integer", "options": [], "defaults": [] },
            { "id": "tier", "prompt": "Tier?", "required": true, "options": [
                { "value": "gold", "label": "Gold" }, { "value": "free", "label": "Free" } ], "defaults": [] }
        ]
    }))
    .expect("valid")
}

#[test]
fn typed_answers_are_checked_against_their_kind_and_bounds() {
    let set = typed_set();
    let resolved = set
        .resolve(&json!({ "name": ["Dana"], "budget": ["12.5"], "seats": ["3"], "tier": ["gold"] }))
        .unwrap();
    assert_eq!(resolved.answers["budget"], ["12.5"]);
    assert!(resolved.defaulted.is_empty());
    let issues = set
        .resolve(
            &json!({ "name": ["D"], "budget": ["lots"], "seats": ["2.5"], "tier": ["silver"] }),
        )
        .unwrap_err();
    assert_eq!(
        paths(&issues),
        [
            "/answers/name/0",
            "/answers/budget/0",
            "/answers/seats/0",
            "/answers/tier/0"
        ]
    );
    assert_eq!(issues[0].message, "at least 2 characters");
    assert!(issues[1].message.contains("not a number"), "{issues:?}");
    assert!(
        issues[2].message.contains("not a whole number"),
        "{issues:?}"
    );
    let issues = set
        .resolve(
            &json!({ "name": ["Dana"], "budget": ["1000"], "tier": ["gold"], "seats": [" 3"] }),
        )
        .unwrap_err();
    assert_eq!(issues[0].message, "at most 100");
    assert_eq!(paths(&issues), ["/answers/budget/0", "/answers/seats/0"]);
    // NaN, infinities and padded numbers are not numbers a person typed.
    for wrong in ["NaN", "inf", " 1"] {
        let issues = set
            .resolve(&json!({ "name": ["Dana"], "budget": [wrong], "tier": ["gold"] }))
            .unwrap_err();
        assert_eq!(paths(&issues), ["/answers/budget/0"], "{wrong}");
    }
}

#[test]
fn a_required_question_must_be_answered_and_optional_ones_default() {
    let set = typed_set();
    let issues = set.resolve(&json!({ "budget": ["1"] })).unwrap_err();
    assert_eq!(paths(&issues), ["/answers/name", "/answers/tier"]);
    assert!(issues.iter().all(|i| i.message == "an answer is required"));
    let issues = set
        .resolve(&json!({ "name": [], "tier": ["gold"] }))
        .unwrap_err();
    assert_eq!(paths(&issues), ["/answers/name"]);
    let resolved = set
        .resolve(&json!({ "name": ["Dana"], "tier": ["free"] }))
        .unwrap();
    assert_eq!(resolved.answers["budget"], ["10"]);
    assert!(resolved.answers["seats"].is_empty());
    assert_eq!(resolved.defaulted, ["budget", "seats"]);
    // One value at most for a typed question.
    let issues = set
        .resolve(&json!({ "name": ["Dana", "Lee"], "tier": ["free"] }))
        .unwrap_err();
    assert_eq!(issues[0].message, "takes at most one value");
}

#[test]
fn typed_questions_are_validated_as_sets() {
    let issues = QuestionSet::parse(&json!({ "questions": [
        { "id": "a", "prompt": "?", "kind": "text", "options": [{ "value": "x", "label": "X" }], "defaults": [] },
        { "id": "b", "prompt": "?", "kind": "number", "multiple": true, "defaults": ["1", "2"], "options": [] },
        { "id": "c", "prompt": "?", "kind": "integer", "defaults": ["x"], "min": 5, "max": 1, "options": [] },
        { "id": "d", "prompt": "?", "kind": "text", "min": -1, "options": [], "defaults": [] },
        { "id": "e", "prompt": "?", "options": [{ "value": "x", "label": "X" }], "defaults": ["x"], "max": 3 },
        { "id": "f", "prompt": "?", "options": [{ "value": "x", "label": "X" }], "defaults": [] },
        { "id": "g", "prompt": "?", "options": [{ "value": "x", "label": "X" }], "defaults": [], "optional": true, "required": true },
        { "id": "h", "prompt": "?", "options": [{ "value": "x", "label": "X" }], "defaults": [], "optional": true }
    ] }))
    .unwrap_err();
    assert_eq!(
        paths(&issues),
        [
            "/questions/0/options",
            "/questions/1/multiple",
            "/questions/1/defaults",
            "/questions/2/defaults/0",
            "/questions/2/max",
            "/questions/3/min",
            "/questions/4/min",
            "/questions/5/defaults",
            "/questions/6/optional",
        ]
    );
    // The seeds' shape is written as it was: no kind, no required.
    let written = serde_json::to_value(scope_set()).unwrap();
    assert!(written["questions"][0].get("kind").is_none());
    assert!(written["questions"][0].get("required").is_none());
    assert_eq!(
        serde_json::to_value(typed_set()).unwrap()["questions"][0]["kind"],
        "text"
    );
}

#[test]
fn a_link_is_an_http_url_with_a_host() {
    for good in [
        "https://sso.example.com/start?state=abc#x",
        "http://127.0.0.1:8080/pay",
        "HTTPS://Example.COM",
        "https://[::1]:8443/x",
    ] {
        assert_eq!(link_issue(good), None, "{good}");
    }
    for bad in [
        "javascript:alert(1)",
        "data:text/html,<b>",
        "ftp://example.com/",
        "https://",
        "https:///path",
        "https://:443/",
        "https://user@/",
        "https://user@example.com/",
        "https://bank.example@evil.example/",
        "https://evil.example\\@bank.example/",
        "https://[/",
        "https://[]/",
        "https://exa\u{202e}mple.com/",
        "https://pаypal.com/",
        "https://exa mple.com/",
        "https://example.com/\u{0}",
        "//example.com/",
        "",
    ] {
        assert!(link_issue(bad).is_some(), "{bad:?} was taken");
    }
    assert!(link_issue(&format!("https://e.com/{}", "a".repeat(MAX_LINK_BYTES))).is_some());

    // A set with a bad link names it; a good one is written back as read.
    let issues = QuestionSet::parse(&json!({ "questions": [
        { "id": "a", "prompt": "Sign in", "link": "javascript:void(0)",
          "options": [{ "value": "done", "label": "Done" }], "defaults": [], "required": true }
    ] }))
    .unwrap_err();
    assert_eq!(paths(&issues), ["/questions/0/link"]);
    let linked = json!({ "questions": [
        { "id": "a", "prompt": "Sign in", "link": "https://sso.example.com/",
          "options": [{ "value": "done", "label": "Done" }], "defaults": [], "multiple": false, "required": true }
    ] });
    let set = QuestionSet::parse(&linked).unwrap();
    assert_eq!(serde_json::to_value(&set).unwrap(), linked);
    assert!(serde_json::to_value(scope_set()).unwrap()["questions"][0]
        .get("link")
        .is_none());
}

proptest! {
    /// Whatever text a server sends as a link, checking it answers and
    /// never panics; what passes starts with an http scheme.
    #[test]
    fn any_link_is_checked(link in ".{0,80}") {
        if link_issue(&link).is_none() {
            prop_assert!(link.to_ascii_lowercase().starts_with("http"));
        }
    }
}
