use super::*;

#[test]
fn a_client_that_cannot_be_built_is_an_error_not_a_default_client() {
    crate::tls::install_crypto_provider();
    // No TLS version at all: no client can be built from this.
    let impossible = crate::tls::http_client()
        .min_tls_version(reqwest::tls::Version::TLS_1_3)
        .max_tls_version(reqwest::tls::Version::TLS_1_2);
    let refused = build_client(impossible).expect_err("refused");
    assert!(
        refused.to_string().contains("http tool client"),
        "{refused}"
    );
    assert!(build_client(crate::tls::http_client()).is_ok());
}

struct Echo;

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "echo".into(),
            description: "echoes".into(),
            input_schema: json!({"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}}),
        }
    }
    async fn execute(&self, arguments: Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
        Ok(arguments)
    }
}

#[tokio::test]
async fn an_echo_tool_answers_its_arguments_and_the_approvals_payload() {
    let echo = EchoTool::new(
        ToolSpec {
            name: "send_email".into(),
            description: String::new(),
            input_schema: json!({ "type": "object" }),
        },
        true,
    );
    assert!(echo.requires_confirmation());
    let mut ctx = ToolContext {
        run_id: RunId::new(),
        thread_id: ThreadId::new(),
        tool_call_id: "c1".into(),
        approval: None,
        answers: None,
    };
    assert_eq!(
        echo.execute(json!({ "to": "a" }), &ctx).await.unwrap(),
        json!({ "echo": { "to": "a" } })
    );
    ctx.approval = Some(Approval {
        approved: true,
        payload: Some(json!({ "note": 1 })),
    });
    assert_eq!(
        echo.execute(json!({ "to": "a" }), &ctx).await.unwrap(),
        json!({ "echo": { "to": "a" }, "payload": { "note": 1 } })
    );
}

#[test]
fn validation_reports_path_and_message() {
    let tool = RegisteredTool::new(Arc::new(Echo)).unwrap();
    assert!(tool.validate(&json!({"to": "a"})).is_empty());
    let issues = tool.validate(&json!({"to": 5}));
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].path, "/to");
    assert!(issues[0].message.contains("string"));
    assert_eq!(tool.validate(&json!({})).len(), 1);
}

fn with_schema(input_schema: serde_json::Value) -> Result<RegisteredTool, String> {
    RegisteredTool::new(Arc::new(EchoTool::new(
        ToolSpec {
            name: "patterned".into(),
            description: String::new(),
            input_schema,
        },
        false,
    )))
}

/// Patterns run on the linear-time engine: what only a backtracking engine
/// can run (lookaround, backreferences) is refused when the schema loads,
/// and a pattern that would backtrack exponentially answers at once.
#[test]
fn schema_patterns_cannot_backtrack() {
    for pattern in ["^(?=a)a$", "^(a)\\1$", "(?<!x)y"] {
        let refused = with_schema(json!({
            "type": "object",
            "properties": { "s": { "type": "string", "pattern": pattern } }
        }))
        .err()
        .unwrap_or_else(|| panic!("{pattern} refused"));
        assert!(refused.contains("invalid input_schema"), "{refused}");
    }
    let nested = with_schema(json!({
        "type": "object",
        "properties": { "s": { "type": "string", "pattern": "^(a+)+$" } }
    }))
    .unwrap();
    // Exponential on a backtracking engine (2^4000 paths); linear here.
    let issues = nested.validate(&json!({ "s": format!("{}!", "a".repeat(4000)) }));
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert!(nested.validate(&json!({ "s": "aaaa" })).is_empty());
}

/// A 1 MiB object of wrong values is hundreds of thousands of issues:
/// the check stops one past the cap, and a message quoting a long value
/// is cut.
#[test]
fn validation_stops_one_past_the_cap_and_cuts_long_messages() {
    let strict = RegisteredTool::new(Arc::new(EchoTool::new(
        ToolSpec {
            name: "strict".into(),
            description: String::new(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "to": { "type": "integer" },
                    "cc": { "type": "array", "items": { "type": "string" } }
                }
            }),
        },
        false,
    )))
    .unwrap();
    let issues = strict.validate(&json!({ "cc": vec![5; 200_000] }));
    assert_eq!(issues.len(), agentenkit_core::questions::MAX_ISSUES + 1);
    let long = strict.validate(&json!({ "to": "x".repeat(100_000) }));
    assert_eq!(long.len(), 1);
    assert_eq!(long[0].path, "/to");
    assert_eq!(
        long[0].message.chars().count(),
        agentenkit_core::questions::MAX_ISSUE_CHARS
    );
    assert!(long[0].message.ends_with('…'));
}

#[tokio::test]
async fn marking_a_tool_requires_confirmation_and_keeps_the_rest() {
    let plain: Arc<dyn Tool> = Arc::new(Echo);
    assert!(!plain.requires_confirmation());
    let marked = mark_requires_confirmation(plain);
    assert!(marked.requires_confirmation());
    assert_eq!(marked.spec().name, "echo");
    let ctx = ToolContext {
        run_id: RunId::new(),
        thread_id: ThreadId::new(),
        tool_call_id: "c1".into(),
        approval: None,
        answers: None,
    };
    assert_eq!(
        marked.execute(json!({"to": "x"}), &ctx).await,
        Ok(json!({"to": "x"}))
    );
}

#[test]
fn an_invalid_schema_is_refused_at_registration() {
    struct Bad;
    #[async_trait]
    impl Tool for Bad {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "bad".into(),
                description: String::new(),
                input_schema: json!({"type": 12}),
            }
        }
        async fn execute(&self, _: Value, _: &ToolContext) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }
    assert!(RegisteredTool::new(Arc::new(Bad)).is_err());
}

#[test]
fn park_answers_are_parsed_and_checked() {
    assert_eq!(
        parse_park(&json!({"reason": "job", "payload": {"id": 7}, "ttlMs": 1000})).unwrap(),
        park_for_input("job", json!({"id": 7}), Some(1000))
    );
    assert_eq!(
        parse_park(&json!({"reason": "job"})).unwrap(),
        park_for_input("job", Value::Null, None)
    );
    assert!(parse_park(&json!({"payload": 1})).is_err());
    assert!(parse_park(&json!({"reason": "job", "ttlMs": -5})).is_err());
    assert!(parse_park(&json!({"reason": "job", "ttlMs": "soon"})).is_err());
    assert!(parse_park(&json!({"reason": "job", "ttlMs": MAX_TTL_MS + 1})).is_err());
    assert!(parse_park(&json!({"reason": "job", "ttlMs": u64::MAX})).is_err());
    assert!(parse_park(&json!({"reason": "job", "ttlMs": MAX_TTL_MS})).is_ok());
}

#[test]
fn idempotency_key_is_run_and_call() {
    let ctx = ToolContext {
        run_id: RunId::new(),
        thread_id: ThreadId::new(),
        tool_call_id: "c1".into(),
        approval: None,
        answers: None,
    };
    assert_eq!(ctx.idempotency_key(), format!("{}:c1", ctx.run_id));
}
