//! Budgets: what is spent, used up, asked for and granted.

use super::*;
use crate::conversation::Usage;
use proptest::prelude::*;
use serde_json::json;

fn tokens(input: u64) -> Limits {
    Limits {
        input_tokens: Some(input),
        ..Limits::default()
    }
}

#[test]
fn a_run_asks_before_the_call_that_would_pass_its_model_calls() {
    let limits = Limits::default().for_run();
    let mut spent = Spent::default();
    for _ in 0..63 {
        spent.add_model_call(Usage::default(), 1, None);
    }
    assert_eq!(limits.exhausted(Scope::Run, &spent, &limits), None);
    spent.add_model_call(Usage::default(), 1, None);
    let asked = limits.exhausted(Scope::Run, &spent, &limits).unwrap();
    assert_eq!(
        (asked.measure, asked.used, asked.limit),
        (Measure::ModelCalls, 64, 64)
    );
    assert_eq!(asked.question(), "used 64 of 64 model calls; allow more?");
}

#[test]
fn a_token_budget_is_used_up_by_what_calls_reported() {
    let limits = tokens(200_000);
    let mut spent = Spent::default();
    spent.add_model_call(
        Usage {
            input_tokens: 199_999,
            output_tokens: 5,
        },
        0,
        None,
    );
    assert_eq!(limits.exhausted(Scope::Run, &spent, &limits), None);
    spent.add_model_call(
        Usage {
            input_tokens: 1_345,
            output_tokens: 5,
        },
        0,
        None,
    );
    let asked = limits.exhausted(Scope::Run, &spent, &limits).unwrap();
    assert_eq!(
        asked.question(),
        "used 201,344 of 200,000 input tokens; allow more?"
    );
    assert_eq!(
        asked.refusal("refused"),
        "budget run.input_tokens used up (201,344 of 200,000) and more was refused"
    );
}

#[test]
fn an_approval_adds_what_it_names_or_the_budgets_own_size() {
    let configured = tokens(1_000);
    let asked = Exhausted {
        scope: Scope::Run,
        measure: Measure::InputTokens,
        used: 1_200,
        limit: 1_000,
        size: 1_000,
    };
    // Past what was used, by what it names, or by the budget's size.
    let named = asked.grant(Some(&json!({ "add": { "input_tokens": 500 } })));
    assert_eq!(named, tokens(700));
    assert_eq!(configured.raised(&named), tokens(1_700));
    assert_eq!(configured.raised(&asked.grant(None)), tokens(2_200));
    // Amounts that do not get past this point, or are not amounts: the size.
    for wrong in [
        json!({ "add": { "input_tokens": 0 } }),
        json!({ "add": { "bogus": 1 } }),
        json!("more"),
    ] {
        assert_eq!(
            configured.raised(&asked.grant(Some(&wrong))),
            tokens(2_200),
            "{wrong}"
        );
    }
}

#[test]
fn a_cost_budget_is_priced_from_the_usage_and_shown_in_dollars() {
    let price = Price {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
    };
    let limits: Limits = serde_json::from_value(json!({ "cost_usd": 0.5 })).unwrap();
    assert_eq!(limits.cost_micro_usd, Some(500_000));
    let mut spent = Spent::default();
    // 100k in at $3/M and 10k out at $15/M: $0.30 + $0.15.
    let usage = Usage {
        input_tokens: 100_000,
        output_tokens: 10_000,
    };
    spent.add_model_call(usage, 0, Some(&price));
    assert_eq!(spent.cost_micro_usd, 450_000);
    assert_eq!(limits.exhausted(Scope::Run, &spent, &limits), None);
    spent.add_model_call(usage, 0, Some(&price));
    let asked = limits.exhausted(Scope::Run, &spent, &limits).unwrap();
    assert_eq!(asked.question(), "used $0.90 of $0.50; allow more?");
    assert_eq!(asked.arguments()["used"], json!(0.9));
    assert_eq!(asked.arguments()["add"], json!({ "cost_usd": 0.5 }));
    let raised = limits.raised(&asked.grant(Some(&json!({ "add": { "cost_usd": 1.25 } }))));
    assert_eq!(raised.cost_micro_usd, Some(2_150_000));
    // No price, no cost.
    let mut unpriced = Spent::default();
    unpriced.add_model_call(usage, 0, None);
    assert_eq!(unpriced.cost_micro_usd, 0);
    for wrong in [json!({ "cost_usd": -1 }), json!({ "cost_usd": "1" })] {
        assert!(
            serde_json::from_value::<Limits>(wrong.clone()).is_err(),
            "{wrong}"
        );
    }
    assert!(Price {
        input_per_mtok: -1.0,
        output_per_mtok: 0.0
    }
    .check()
    .is_err());
}

#[test]
fn a_thread_budget_says_so() {
    let limits = Limits {
        model_calls: Some(2),
        ..Limits::default()
    };
    let spent = Spent {
        model_calls: 2,
        ..Spent::default()
    };
    let asked = limits.exhausted(Scope::Thread, &spent, &limits).unwrap();
    assert_eq!(
        asked.question(),
        "the thread used 2 of 2 model calls; allow more?"
    );
    assert_eq!(asked.arguments()["budget"], "thread");
    assert!(asked
        .refusal("refused")
        .starts_with("budget thread.model_calls used up"));
}

#[test]
fn a_limit_of_nothing_is_refused() {
    assert!(tokens(0).check().unwrap_err().contains("input_tokens"));
    assert!(tokens(1).check().is_ok());
}

#[test]
fn the_request_names_what_an_approval_adds_by_default() {
    let asked = Exhausted {
        scope: Scope::Run,
        measure: Measure::ModelCalls,
        used: 4,
        limit: 4,
        size: 4,
    };
    let shown = asked.arguments();
    assert_eq!(shown["add"], json!({ "model_calls": 4 }));
    assert_eq!(shown["measure"], "model_calls");
    let back: Exhausted = serde_json::from_value(serde_json::to_value(asked).unwrap()).unwrap();
    assert_eq!(back, asked);
}

proptest! {
    /// An approval always takes the measure used up past what was used,
    /// raises nothing else, and never lifts an unlimited measure into a
    /// limit.
    #[test]
    fn an_approval_raises_the_measure_used_up_and_nothing_else(
        limit in 1u64..10_000, over in 0u64..10_000, added in proptest::option::of(0u64..10_000),
    ) {
        let configured = Limits { output_tokens: Some(limit), model_calls: Some(50), ..Limits::default() };
        let mut spent = Spent::default();
        spent.add_model_call(Usage { input_tokens: 0, output_tokens: limit + over }, 0, None);
        let asked = configured.exhausted(Scope::Run, &spent, &configured).unwrap();
        prop_assert_eq!(asked.measure, Measure::OutputTokens);
        let payload = added.map(|n| json!({ "add": { "output_tokens": n } }));
        let raised = configured.raised(&asked.grant(payload.as_ref()));
        // Past what was used: the run is within it again.
        prop_assert!(raised.output_tokens > Some(spent.output_tokens));
        prop_assert_eq!(raised.exhausted(Scope::Run, &spent, &configured), None);
        prop_assert_eq!(raised.model_calls, configured.model_calls);
        prop_assert_eq!(raised.input_tokens, None);
    }
}
