use super::*;
use crate::reply::{reduce, Verdict};
use crate::ToolKind;
use chrono::TimeZone;
use proptest::prelude::*;
use serde_json::json;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn vote(principal: &str) -> Vote {
    Vote {
        principal: principal.into(),
        key_id: None,
        answered_by: "o".into(),
        answered_at: at(1),
        message: None,
    }
}

fn waiting() -> Waiting {
    Waiting {
        kind: ToolKind::Approval,
        reason: "approve?".into(),
        expires_at: Some(at(60)),
        votes: vec![],
    }
}

/// The reply `verdict` settles an approval with, answered at `at(5)`.
fn reply(verdict: Verdict) -> SettledReply {
    let mut reply = reduce(ToolKind::Approval, &verdict, &json!({})).expect("an approval verdict");
    reply.answered_at = Some(at(5));
    reply
}

fn reject() -> Verdict {
    Verdict::Reject {
        reason: Some("no".into()),
    }
}

fn arb_result() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(1)),
        Just(json!({"ok": true})),
        Just(json!("text"))
    ]
}

fn arb_state() -> impl Strategy<Value = CallState> {
    let waiting = (
        proptest::option::of(0i64..100),
        proptest::collection::vec("[a-c]", 0..3),
    )
        .prop_map(|(expires, voters)| Waiting {
            kind: ToolKind::Approval,
            reason: "why".into(),
            expires_at: expires.map(at),
            votes: voters.iter().map(|p| vote(p)).collect(),
        });
    let decided = (any::<bool>(), proptest::option::of(arb_result())).prop_map(|(yes, ran)| {
        let reply = reply(if yes { Verdict::approve() } else { reject() });
        let result = if yes { ran } else { reply.denial() };
        CallState::Decided(Box::new(Decided {
            reason: "why".into(),
            reply,
            result,
        }))
    });
    prop_oneof![
        proptest::option::of(arb_result())
            .prop_map(|park_request| CallState::Proposed { park_request }),
        waiting.prop_map(CallState::Waiting),
        decided,
        (0i64..100).prop_map(|s| CallState::Expired {
            reason: "why".into(),
            at: at(s),
            result: expired_result(),
        }),
        arb_result().prop_map(|result| CallState::Ran { result }),
        arb_result().prop_map(|result| CallState::Failed { result }),
        arb_result().prop_map(|result| CallState::Refused { result }),
        proptest::option::of(Just("why".to_owned()))
            .prop_map(|reason| CallState::Cancelled { reason }),
    ]
}

fn arb_event() -> impl Strategy<Value = CallEvent> {
    let status = prop::sample::select(ToolCallStatus::ALL.to_vec());
    prop_oneof![
        arb_result().prop_map(|request| CallEvent::RecordParkRequest { request }),
        (
            prop::sample::select(ToolKind::ALL.to_vec()),
            proptest::option::of(0i64..100)
        )
            .prop_map(|(kind, s)| CallEvent::Park {
                kind,
                arguments: None,
                reason: "why".into(),
                expires_at: s.map(at),
            }),
        proptest::collection::vec("[a-c]", 0..3).prop_map(|voters| CallEvent::Vote {
            votes: voters.iter().map(|p| vote(p)).collect(),
        }),
        (0i64..100).prop_map(|s| CallEvent::ScheduleExpiry { expires_at: at(s) }),
        any::<bool>().prop_map(|yes| CallEvent::Answer {
            reply: Box::new(reply(if yes { Verdict::approve() } else { reject() })),
        }),
        (0i64..100).prop_map(|s| CallEvent::Expire { at: at(s) }),
        (status, arb_result()).prop_map(|(status, result)| CallEvent::Finish { status, result }),
        arb_result().prop_map(|result| CallEvent::Refuse { result }),
        arb_result().prop_map(|result| CallEvent::RecordResult { result }),
        Just(CallEvent::Cancel),
    ]
}

/// Whether `event` changes the status of a call (as opposed to its data).
fn moves(event: &CallEvent) -> bool {
    !matches!(
        event,
        CallEvent::RecordParkRequest { .. }
            | CallEvent::Vote { .. }
            | CallEvent::ScheduleExpiry { .. }
            | CallEvent::RecordResult { .. }
    )
}

proptest! {
    /// The guard the store writes with is the rule `apply` follows: an
    /// event applies only from its source statuses, and a status change is
    /// one the status table allows.
    #[test]
    fn an_event_applies_only_from_its_sources_and_along_the_status_table(
        state in arb_state(),
        event in arb_event(),
    ) {
        let from = state.status();
        let from_source = event.sources().contains(&from);
        match state.clone().apply(event.clone()) {
            Ok(to) => {
                prop_assert!(from_source, "{} from {from}", event.name());
                if moves(&event) {
                    prop_assert!(from.can_become(to.status()), "{from} -> {}", to.status());
                } else {
                    prop_assert_eq!(to.status(), from);
                }
            }
            Err(Error::InvalidTransition { entity, .. }) => {
                prop_assert_eq!(entity, "tool call");
                // Refused from a source status only when the event's own
                // data is not one it can settle with (a finish that is
                // neither run nor failed), or the result of a call that
                // was not approved.
                if from_source && event.is_well_formed() {
                    prop_assert!(
                        matches!(
                            (&state, &event),
                            (CallState::Ran { .. } | CallState::Decided(_), CallEvent::RecordResult { .. })
                        ),
                        "{} from {from}",
                        event.name()
                    );
                }
                if from_source {
                    let bad_finish = matches!(
                        &event,
                        CallEvent::Finish { status, .. }
                            if !matches!(status, ToolCallStatus::Executed | ToolCallStatus::Failed)
                    );
                    let not_approved = matches!(
                        (&state, &event),
                        (CallState::Ran { .. } | CallState::Decided(_), CallEvent::RecordResult { .. })
                    );
                    let not_a_wait = matches!(
                        &event,
                        CallEvent::Park { kind, .. } if kind.tool_type() != "action"
                    );
                    prop_assert!(bad_finish || not_approved || not_a_wait, "{} from {from}", event.name());
                }
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }

    /// A settled call never moves again: only an approved call's result is
    /// still recorded.
    #[test]
    fn a_settled_call_takes_no_status_change(state in arb_state(), event in arb_event()) {
        let open = matches!(state, CallState::Proposed { .. } | CallState::Waiting(_));
        if !open && moves(&event) {
            prop_assert!(state.apply(event).is_err());
        }
    }

    /// A wait keeps its reason through whatever ends it, and its votes
    /// until then.
    #[test]
    fn a_wait_keeps_its_reason_and_votes(state in arb_state(), event in arb_event()) {
        let CallState::Waiting(before) = state.clone() else { return Ok(()) };
        match state.apply(event.clone()) {
            Ok(CallState::Waiting(after)) => {
                prop_assert_eq!(&after.reason, &before.reason);
                if !matches!(event, CallEvent::Vote { .. }) {
                    prop_assert_eq!(after.votes, before.votes);
                }
            }
            Ok(CallState::Decided(d)) => prop_assert_eq!(d.reason, before.reason),
            Ok(CallState::Expired { reason, .. }) => prop_assert_eq!(reason, before.reason),
            Ok(CallState::Cancelled { reason }) => prop_assert_eq!(reason, Some(before.reason)),
            Ok(other) => prop_assert!(false, "a wait became {other:?}"),
            Err(_) => {}
        }
    }
}

#[test]
fn every_status_change_the_table_allows_has_an_event() {
    let from_state = |status: ToolCallStatus| match status {
        ToolCallStatus::Proposed => CallState::proposed(),
        ToolCallStatus::PendingApproval => CallState::Waiting(waiting()),
        _ => unreachable!("only open calls move"),
    };
    let events = [
        CallEvent::Park {
            kind: ToolKind::Ask,
            arguments: None,
            reason: "r".into(),
            expires_at: None,
        },
        CallEvent::Answer {
            reply: Box::new(reply(Verdict::approve())),
        },
        CallEvent::Answer {
            reply: Box::new(reply(reject())),
        },
        CallEvent::Expire { at: at(9) },
        CallEvent::Finish {
            status: ToolCallStatus::Executed,
            result: json!(1),
        },
        CallEvent::Finish {
            status: ToolCallStatus::Failed,
            result: json!(1),
        },
        CallEvent::Refuse { result: json!(1) },
        CallEvent::Cancel,
    ];
    for &from in ToolCallStatus::ALL {
        for &to in ToolCallStatus::ALL {
            if !from.can_become(to) {
                continue;
            }
            let reached = events.iter().any(|event| {
                from_state(from)
                    .apply(event.clone())
                    .is_ok_and(|state| state.status() == to)
            });
            assert!(reached, "{from} -> {to} has no event");
        }
    }
}

#[test]
fn a_decided_call_keeps_what_the_model_reads() {
    let approved = CallState::Waiting(waiting())
        .apply(CallEvent::Answer {
            reply: Box::new(reply(Verdict::approve())),
        })
        .unwrap();
    assert!(matches!(approved, CallState::Decided(_)), "{approved:?}");
    assert_eq!(
        approved.result(),
        None,
        "an approved call's result is the tool's"
    );
    let ran = approved
        .apply(CallEvent::RecordResult { result: json!(7) })
        .unwrap();
    assert_eq!(ran.status(), ToolCallStatus::Executed);
    assert_eq!(ran.result(), Some(&json!(7)));

    let denied = CallState::Waiting(waiting())
        .apply(CallEvent::Answer {
            reply: Box::new(reply(reject())),
        })
        .unwrap();
    assert_eq!(denied.status(), ToolCallStatus::Rejected);
    assert_eq!(
        denied.result(),
        Some(&json!({"denied": true, "reason": "no"}))
    );

    let questions = json!({"questions": [{
        "id": "q", "prompt": "?", "options": [{"value": "a", "label": "A"}], "defaults": ["a"],
    }]});
    let mut skipped = reduce(ToolKind::Ask, &Verdict::Skip, &questions).unwrap();
    skipped.answered_at = Some(at(3));
    let skipped = CallState::Waiting(waiting())
        .apply(CallEvent::Answer {
            reply: Box::new(skipped),
        })
        .unwrap();
    assert_eq!(skipped.status(), ToolCallStatus::Rejected);
    assert_eq!(skipped.result().map(|r| &r["skipped"]), Some(&json!(true)));
}

#[test]
fn an_answer_must_settle_the_call_and_say_when() {
    let mut unanswered = reply(Verdict::approve());
    unanswered.answered_at = None;
    assert!(CallState::Waiting(waiting())
        .apply(CallEvent::Answer {
            reply: Box::new(unanswered)
        })
        .is_err());
    let mut expired = reply(reject());
    expired.status = ToolCallStatus::Expired;
    assert!(CallState::Waiting(waiting())
        .apply(CallEvent::Answer {
            reply: Box::new(expired)
        })
        .is_err());
}

#[test]
fn an_expired_call_reads_the_timeout_denial_an_expired_reply_gives() {
    let mut reply = reply(reject());
    reply.status = ToolCallStatus::Expired;
    reply.approved = false;
    assert_eq!(reply.denial(), Some(expired_result()));
    let expired = CallState::Waiting(waiting())
        .apply(CallEvent::Expire { at: at(61) })
        .unwrap();
    assert_eq!(
        expired,
        CallState::Expired {
            reason: "approve?".into(),
            at: at(61),
            result: expired_result(),
        }
    );
}

fn run_call(state: CallState) -> RunCall {
    RunCall {
        state,
        ..RunCall::proposed(ToolCallId("c1".into()), ToolKind::Approval)
    }
}

#[test]
fn a_call_has_no_reply_until_it_settles() {
    assert_eq!(
        run_call(CallState::proposed()).reply(),
        Err(ToolCallStatus::Proposed)
    );
    assert_eq!(
        run_call(CallState::Waiting(waiting())).reply(),
        Err(ToolCallStatus::PendingApproval)
    );
}

#[test]
fn a_decided_call_replies_with_the_reply_it_was_decided_by() {
    let decided = CallState::Waiting(waiting())
        .answer(reply(reject()))
        .unwrap();
    let got = run_call(decided).reply().unwrap();
    assert_eq!(got, reply(reject()));
    assert_eq!(got.reason.as_deref(), Some("no"));
}

#[test]
fn an_expired_call_replies_unanswered_with_the_timeout_denial() {
    let expired = CallState::Waiting(waiting()).expire(at(9)).unwrap();
    let got = run_call(expired).reply().unwrap();
    assert_eq!(got.status, ToolCallStatus::Expired);
    assert!(!got.approved);
    assert_eq!(got.reason.as_deref(), Some(TIMEOUT_DENIAL));
    assert_eq!(got.denial(), Some(expired_result()));
    assert_eq!((got.answered_at, got.answered_by), (Some(at(9)), None));
}

#[test]
fn a_call_settled_without_a_wait_replies_with_its_status() {
    let refused = run_call(CallState::Refused {
        result: json!({ "denied": true, "reason": "denied before" }),
    });
    let got = refused.reply().unwrap();
    assert_eq!(
        (got.status, got.approved, got.reason.as_deref()),
        (ToolCallStatus::Rejected, false, Some("denied before"))
    );
    let ran = run_call(CallState::Ran { result: json!(1) })
        .reply()
        .unwrap();
    assert_eq!((ran.status, ran.approved), (ToolCallStatus::Executed, true));
    let cancelled = run_call(CallState::Cancelled { reason: None })
        .reply()
        .unwrap();
    assert_eq!(cancelled.status, ToolCallStatus::Cancelled);
}

#[test]
fn a_delegation_runs_once_its_child_exists_and_settles_with_its_result() {
    let child = crate::RunId::new();
    let mut call = RunCall::proposed(ToolCallId("d1".into()), ToolKind::Delegate);
    assert_eq!(call.delegation(), None);
    call.child = Some(child);
    assert_eq!(call.delegation(), Some(Delegation::Running { child }));
    call.apply(CallEvent::Finish {
        status: ToolCallStatus::Failed,
        result: json!({"error": "child failed"}),
    })
    .unwrap();
    assert_eq!(
        call.delegation(),
        Some(Delegation::Settled {
            status: ToolCallStatus::Failed,
            result: json!({"error": "child failed"}),
        })
    );
}

#[test]
fn a_run_call_refuses_an_event_its_state_does_not_take_and_keeps_its_state() {
    let mut call = run_call(CallState::Ran { result: json!(1) });
    assert!(call.apply(CallEvent::Cancel).is_err());
    assert_eq!(call.state, CallState::Ran { result: json!(1) });
    assert_eq!(call.park_request(), None);
    let mut proposed = run_call(CallState::proposed());
    proposed
        .apply(CallEvent::RecordParkRequest {
            request: json!({"job": 1}),
        })
        .unwrap();
    assert_eq!(proposed.park_request(), Some(&json!({"job": 1})));
    let mut tool = RunCall::proposed(ToolCallId("f1".into()), ToolKind::Function);
    tool.apply(CallEvent::Park {
        kind: ToolKind::Park,
        arguments: None,
        reason: "job".into(),
        expires_at: None,
    })
    .unwrap();
    assert_eq!(tool.kind, ToolKind::Park);
    assert_eq!(tool.state.status(), ToolCallStatus::PendingApproval);
    assert!(tool.apply(CallEvent::Cancel).is_ok());
    assert!(tool
        .apply(CallEvent::Park {
            kind: ToolKind::Approval,
            arguments: None,
            reason: "again".into(),
            expires_at: None,
        })
        .is_err());
    assert_eq!(tool.kind, ToolKind::Park, "a refused park changes nothing");
}
