use super::*;
use agentenkit_core::reply::{reduce, Verdict};
use chrono::TimeZone;
use proptest::prelude::*;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn arb_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(1)),
        Just(json!({"ok": true, "reason": "in the output"})),
        "[a-z]{0,6}".prop_map(|s| json!(s)),
    ]
}

fn arb_text() -> impl Strategy<Value = String> {
    "[a-z ]{1,12}"
}

fn arb_waiting() -> impl Strategy<Value = Waiting> {
    let vote = (arb_text(), proptest::option::of(arb_text()), 0i64..9).prop_map(
        |(principal, key_id, s)| Vote {
            principal,
            key_id,
            answered_by: "o".into(),
            answered_at: at(s),
            message: None,
        },
    );
    (
        prop::sample::select(vec![ToolKind::Approval, ToolKind::Park, ToolKind::Ask]),
        arb_text(),
        proptest::option::of(0i64..100),
        proptest::collection::vec(vote, 0..3),
    )
        .prop_map(|(kind, reason, expires, votes)| Waiting {
            kind,
            reason,
            expires_at: expires.map(at),
            votes: if kind == ToolKind::Approval {
                votes
            } else {
                vec![]
            },
        })
}

/// A reply as the answer rules settle a wait of `kind` with: reduced
/// from a verdict, then signed by who answered, when, with which key.
fn arb_reply(kind: ToolKind) -> impl Strategy<Value = SettledReply> {
    let verdict = prop_oneof![
        (
            proptest::option::of(arb_json()),
            proptest::option::of(arb_json()),
            proptest::option::of(arb_text())
        )
            .prop_map(move |(payload, arguments, message)| Verdict::Approve {
                payload,
                arguments: arguments.filter(|_| kind == ToolKind::Approval),
                message,
            }),
        proptest::option::of(arb_text()).prop_map(|reason| Verdict::Reject { reason }),
        Just(Verdict::Skip),
        Just(Verdict::Answer {
            answers: json!({ "q": ["b"] })
        }),
    ];
    let questions = json!({ "questions": [
        { "id": "q", "prompt": "Which?", "defaults": ["a"],
          "options": [{ "value": "a", "label": "A" }, { "value": "b", "label": "B" }] }
    ]});
    (
        verdict,
        arb_text(),
        proptest::option::of(arb_text()),
        proptest::option::of(Just(json!([{ "principal": "p" }]))),
    )
        .prop_filter_map(
            "a verdict this kind takes",
            move |(verdict, by, key_id, approvals)| {
                let mut reply = reduce(kind, &verdict, &questions).ok()?;
                reply.answered_by = Some(by);
                reply.answered_at = Some(at(7));
                reply.arguments_hash = Some("sha256:ab".into());
                reply.key_id = key_id;
                reply.approvals = approvals;
                Some(reply)
            },
        )
}

/// A call in any state its events can leave it in.
fn arb_call() -> impl Strategy<Value = RunCall> {
    let open = arb_waiting().prop_map(CallState::Waiting);
    let decided = arb_waiting().prop_flat_map(|waiting| {
        let kind = waiting.kind;
        (arb_reply(kind), proptest::option::of(arb_json())).prop_map(move |(reply, ran)| {
            let state = CallState::Waiting(waiting.clone()).answer(reply).unwrap();
            match ran {
                Some(result) if kind != ToolKind::Ask => {
                    state.clone().record_result(result).unwrap_or(state)
                }
                _ => state,
            }
        })
    });
    let state = prop_oneof![
        proptest::option::of(arb_json())
            .prop_map(|park_request| CallState::Proposed { park_request }),
        open,
        decided,
        (arb_waiting(), 0i64..100).prop_map(|(w, s)| CallState::Waiting(w).expire(at(s)).unwrap()),
        (0..3u8, arb_json()).prop_map(|(which, result)| match which {
            0 => CallState::Ran { result },
            1 => CallState::Failed { result },
            _ => CallState::Refused { result },
        }),
        Just(CallState::proposed().cancel().unwrap()),
        arb_waiting().prop_map(|w| CallState::Waiting(w).cancel().unwrap()),
    ];
    (state, any::<bool>()).prop_map(|(state, child)| {
        let kind = match &state {
            CallState::Waiting(w) => w.kind,
            CallState::Decided(d) if d.reply.answers.is_some() => ToolKind::Ask,
            CallState::Decided(d) if d.reply.payload.is_some() => ToolKind::Park,
            CallState::Decided(_) => ToolKind::Approval,
            _ if child => ToolKind::Delegate,
            _ => ToolKind::Function,
        };
        RunCall {
            id: ToolCallId("c1".into()),
            kind,
            state,
            child: child.then(|| RunId(Uuid::nil())),
        }
    })
}

proptest! {
    /// The one decoder reads back what the encoder stored, for every
    /// state a call can be in: a worker sees the call it wrote.
    #[test]
    fn a_call_reads_back_from_its_columns(call in arb_call()) {
        prop_assert_eq!(CallColumns::of(&call).decode().unwrap(), call);
    }

    /// And through the JSON `ACQUIRE` renders the columns as.
    #[test]
    fn a_call_reads_back_from_the_acquire_json(call in arb_call()) {
        let columns = CallColumns::of(&call);
        let json = json!({
            "id": columns.id, "kind": columns.kind, "status": columns.status,
            "reason": columns.reason, "expires_at": columns.expires_at,
            "approvals": columns.approvals, "park_request": columns.park_request,
            "payload": columns.payload, "result": columns.result,
            "defaulted": columns.defaulted, "answered_by": columns.answered_by,
            "answered_at": columns.answered_at, "decision": columns.decision,
            "child": columns.child,
        });
        let read: CallColumns = serde_json::from_value(json).unwrap();
        prop_assert_eq!(read.decode().unwrap(), call);
    }

    /// The statements leave an earlier state's columns in place: a park
    /// request after the park (`PARK_SQL`), votes and the expiry after the
    /// wait (`ANSWER_SQL`, `EXPIRE_SQL`, `CANCEL_SQL`), an empty vote list
    /// where a revoked key's votes were dropped (`DROP_VOTES_OF_KEY_SQL`).
    /// The decoder reads the same call from such a row.
    #[test]
    fn columns_an_earlier_state_left_do_not_change_the_call(
        call in arb_call(),
        request in arb_json(),
        expires in 0i64..100,
        votes in prop_oneof![Just(json!([])), Just(json!([{ "principal": "p",
            "answeredBy": "o", "answeredAt": "2027-01-15T08:00:00Z" }]))],
    ) {
        let mut row = CallColumns::of(&call);
        match &call.state {
            CallState::Proposed { .. } => {}
            CallState::Waiting(waiting) => {
                if waiting.votes.is_empty() {
                    row.approvals = Some(json!([]));
                }
                row.park_request = Some(request);
            }
            _ => {
                row.park_request = Some(request);
                row.approvals = Some(votes);
                row.expires_at = Some(at(expires));
            }
        }
        prop_assert_eq!(row.decode().unwrap(), call);
    }
}

#[test]
fn columns_no_state_has_are_refused_as_corrupt() {
    let call = RunCall::proposed(ToolCallId("c1".into()), ToolKind::Approval);
    let mut waiting_without_reason = CallColumns::of(&call);
    waiting_without_reason.status = "pending_approval".into();
    let mut ran_without_result = CallColumns::of(&call);
    ran_without_result.status = "executed".into();
    let mut expired_unanswered = CallColumns::of(&call);
    expired_unanswered.status = "expired".into();
    expired_unanswered.reason = Some("why".into());
    expired_unanswered.result = Some(agentenkit_core::call::expired_result());
    let mut unknown = CallColumns::of(&call);
    unknown.status = "lost".into();
    for columns in [
        waiting_without_reason,
        ran_without_result,
        expired_unanswered,
    ] {
        let err = columns.clone().decode().unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{columns:?}: {err:?}");
    }
    assert!(unknown.decode().is_err());
}

#[test]
fn a_rejection_without_a_reason_reads_back_without_one() {
    let waiting = CallState::Waiting(Waiting {
        kind: ToolKind::Approval,
        reason: "why".into(),
        expires_at: None,
        votes: vec![],
    });
    let mut reply = reduce(
        ToolKind::Approval,
        &Verdict::Reject { reason: None },
        &json!({}),
    )
    .unwrap();
    reply.answered_at = Some(at(1));
    let call = RunCall {
        state: waiting.answer(reply).unwrap(),
        ..RunCall::proposed(ToolCallId("c1".into()), ToolKind::Approval)
    };
    let columns = CallColumns::of(&call);
    assert_eq!(
        columns.result.as_ref().unwrap()["reason"],
        DEFAULT_REJECTION
    );
    let read = columns.decode().unwrap();
    assert_eq!(read.reply().unwrap().reason, None);
    assert_eq!(read, call);
}

#[test]
fn an_event_no_call_takes_is_refused_before_it_is_written() {
    let (run, id) = (RunId::new(), ToolCallId("c1".into()));
    let cancelled_finish = CallEvent::Finish {
        status: ToolCallStatus::Cancelled,
        result: json!(1),
    };
    let park_as_function = CallEvent::Park {
        kind: ToolKind::Function,
        arguments: None,
        reason: "r".into(),
        expires_at: None,
    };
    for event in [cancelled_finish, park_as_function] {
        assert!(
            matches!(write(run, &id, &event), Err(Error::Corrupt(_))),
            "{event:?}"
        );
    }
    let ran = CallEvent::Finish {
        status: ToolCallStatus::Executed,
        result: json!(1),
    };
    assert!(write(run, &id, &ran)
        .unwrap()
        .sql()
        .contains("status = ANY($3)"));
}
