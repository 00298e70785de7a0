use super::*;
use chrono::TimeZone;
use serde_json::json;

fn at() -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap()
}

fn send() -> Value {
    json!({ "to": "a@b.c" })
}

fn approval(arguments: &Value) -> Addressed<'_> {
    Addressed {
        kind: ToolKind::Approval,
        status: ToolCallStatus::PendingApproval,
        current: true,
        moved_on: false,
        tool_name: "send",
        arguments,
        votes: &[],
        agent: "agent",
        agent_version: None,
        answered_at: at(),
    }
}

fn owner() -> Caller<'static> {
    static NOBODY: std::sync::OnceLock<Approver> = std::sync::OnceLock::new();
    Caller {
        owner: "alice",
        scopes: None,
        approver: NOBODY.get_or_init(Approver::default),
        shown_hash: None,
    }
}

fn settled(ruling: Result<Ruling, AnswerError>) -> SettledReply {
    match ruling {
        Ok(Ruling::Settle(reply)) => *reply,
        other => panic!("expected a settle, got {other:?}"),
    }
}

fn two_of_ops() -> Policy {
    Policy {
        rule: ApprovalRule {
            required: 2,
            from: vec!["ops".into()],
        },
        ..Policy::default()
    }
}

fn in_ops(key: &str) -> Approver {
    Approver {
        key_id: Some(key.into()),
        holder: None,
        groups: vec!["ops".into()],
    }
}

#[test]
fn an_approval_settles_with_who_when_and_the_hash_it_decided_on() {
    let arguments = send();
    let reply = settled(rule(
        &approval(&arguments),
        &Verdict::approve(),
        &owner(),
        &Policy::default(),
    ));
    assert_eq!(reply.status, ToolCallStatus::Executed);
    assert_eq!(reply.answered_by.as_deref(), Some("alice"));
    assert_eq!(reply.answered_at, Some(at()));
    assert_eq!(reply.arguments_hash, Some(arguments_hash(&arguments)));
}

#[test]
fn a_key_without_the_scope_learns_nothing_not_even_that_it_is_closed() {
    let arguments = send();
    let mut closed = approval(&arguments);
    closed.status = ToolCallStatus::Executed;
    let caller = Caller {
        scopes: Some(KeyScopes::of(&[KeyScope::RespondQuestions])),
        ..owner()
    };
    for addressed in [approval(&arguments), closed] {
        assert_eq!(
            rule(&addressed, &Verdict::approve(), &caller, &Policy::default()),
            Err(AnswerError::Forbidden {
                missing: KeyScope::RespondApprovals
            })
        );
    }
}

#[test]
fn a_request_no_longer_open_refuses_every_reply_whatever_its_shape() {
    let arguments = send();
    for (status, current, reason) in [
        (
            ToolCallStatus::Executed,
            true,
            "This request was already answered",
        ),
        (ToolCallStatus::Expired, true, "This request has expired"),
        (
            ToolCallStatus::Cancelled,
            true,
            "This request was cancelled",
        ),
        (
            ToolCallStatus::PendingApproval,
            false,
            "This request is no longer current",
        ),
    ] {
        let mut addressed = approval(&arguments);
        addressed.status = status;
        addressed.current = current;
        addressed.moved_on = false;
        // even a reply of the wrong shape, or from another version
        let policy = Policy {
            other_version: true,
            ..Policy::default()
        };
        assert_eq!(
            rule(&addressed, &Verdict::Skip, &owner(), &policy),
            Ok(Ruling::Refused(reason))
        );
    }
}

#[test]
fn a_run_of_another_version_is_refused_for_the_caller_to_check_by_it() {
    let arguments = send();
    let mut pinned = approval(&arguments);
    pinned.agent_version = Some("v1");
    let other = Policy {
        other_version: true,
        ..Policy::default()
    };
    assert_eq!(
        rule(&pinned, &Verdict::approve(), &owner(), &other),
        Err(AnswerError::PinnedToOtherVersion {
            agent: "agent".into(),
            version: "v1".into()
        })
    );
    // a run from before versions is checked by whatever the caller has
    pinned.agent_version = None;
    assert!(rule(&pinned, &Verdict::approve(), &owner(), &other).is_ok());
}

#[test]
fn a_reply_of_the_wrong_shape_is_a_mismatch() {
    let arguments = send();
    assert_eq!(
        rule(
            &approval(&arguments),
            &Verdict::Skip,
            &owner(),
            &Policy::default()
        ),
        Err(AnswerError::Mismatch {
            kind: ToolKind::Approval
        })
    );
}

#[test]
fn a_hash_other_than_the_calls_is_refused() {
    let arguments = send();
    let caller = Caller {
        shown_hash: Some("0000"),
        ..owner()
    };
    assert!(matches!(
        rule(
            &approval(&arguments),
            &Verdict::approve(),
            &caller,
            &Policy::default()
        ),
        Err(AnswerError::ArgumentsHashMismatch { .. })
    ));
    let hash = arguments_hash(&arguments);
    let caller = Caller {
        shown_hash: Some(&hash),
        ..owner()
    };
    assert!(rule(
        &approval(&arguments),
        &Verdict::approve(),
        &caller,
        &Policy::default()
    )
    .is_ok());
}

fn edit() -> Verdict {
    Verdict::Approve {
        payload: None,
        arguments: Some(json!({ "to": "ops@b.c" })),
        message: None,
    }
}

#[test]
fn edits_settle_only_when_the_policy_checked_them_and_found_nothing() {
    let arguments = send();
    let unchecked = rule(&approval(&arguments), &edit(), &owner(), &Policy::default());
    assert!(
        matches!(unchecked, Err(AnswerError::InvalidArguments(_))),
        "{unchecked:?}"
    );
    let misfit = Policy {
        edit_issues: Some(vec![Issue {
            path: "/to".into(),
            message: "not a string".into(),
        }]),
        ..Policy::default()
    };
    assert!(matches!(
        rule(&approval(&arguments), &edit(), &owner(), &misfit),
        Err(AnswerError::InvalidArguments(issues)) if issues[0].path == "/to"
    ));
    let fits = Policy {
        edit_issues: Some(vec![]),
        ..Policy::default()
    };
    let reply = settled(rule(&approval(&arguments), &edit(), &owner(), &fits));
    assert_eq!(reply.arguments, Some(json!({ "to": "ops@b.c" })));
    assert_eq!(
        reply.arguments_hash,
        Some(arguments_hash(&arguments)),
        "of what was proposed"
    );
}

#[test]
fn a_job_or_question_set_cannot_be_edited() {
    let arguments = json!({ "job": 7 });
    let mut job = approval(&arguments);
    job.kind = ToolKind::Park;
    assert_eq!(
        rule(&job, &edit(), &owner(), &Policy::default()),
        Err(AnswerError::CannotEdit {
            kind: "park".into()
        })
    );
}

#[test]
fn a_call_several_approve_counts_each_person_once_then_settles() {
    let arguments = send();
    let (first, second) = (in_ops("k1"), in_ops("k2"));
    let caller = |approver| Caller {
        approver,
        ..owner()
    };
    let Ok(Ruling::Vote {
        votes,
        given,
        required,
    }) = rule(
        &approval(&arguments),
        &Verdict::approve(),
        &caller(&first),
        &two_of_ops(),
    )
    else {
        panic!("counted")
    };
    assert_eq!((given, required), (1, 2));
    let mut addressed = approval(&arguments);
    addressed.votes = &votes;
    assert_eq!(
        rule(
            &addressed,
            &Verdict::approve(),
            &caller(&first),
            &two_of_ops()
        ),
        Ok(Ruling::Refused("You have already approved this request"))
    );
    let reply = settled(rule(
        &addressed,
        &Verdict::approve(),
        &caller(&second),
        &two_of_ops(),
    ));
    let approvals = reply.approvals.expect("the votes go with the decision");
    assert_eq!(approvals.as_array().map(Vec::len), Some(2));
}

#[test]
fn only_an_approver_may_approve_or_deny_a_call_several_approve() {
    let arguments = send();
    let outsider = Approver {
        key_id: Some("k9".into()),
        holder: None,
        groups: vec!["sales".into()],
    };
    let caller = Caller {
        approver: &outsider,
        ..owner()
    };
    for verdict in [Verdict::approve(), Verdict::Reject { reason: None }] {
        assert_eq!(
            rule(&approval(&arguments), &verdict, &caller, &two_of_ops()),
            Err(AnswerError::NotAnApprover {
                groups: vec!["ops".into()]
            })
        );
    }
    // one approver's deny settles it
    let ops = in_ops("k1");
    let caller = Caller {
        approver: &ops,
        ..owner()
    };
    let reply = settled(rule(
        &approval(&arguments),
        &Verdict::Reject { reason: None },
        &caller,
        &two_of_ops(),
    ));
    assert_eq!(reply.status, ToolCallStatus::Rejected);
}

#[test]
fn no_single_approver_edits_a_call_several_approve() {
    let arguments = send();
    let ops = in_ops("k1");
    let caller = Caller {
        approver: &ops,
        ..owner()
    };
    let policy = Policy {
        edit_issues: Some(vec![]),
        ..two_of_ops()
    };
    assert_eq!(
        rule(&approval(&arguments), &edit(), &caller, &policy),
        Err(AnswerError::CannotEdit {
            kind: "multi-party approval".into()
        })
    );
}

#[test]
fn the_rule_of_several_approvers_is_an_approvals_only() {
    let questions = json!({ "questions": [{
        "id": "q", "prompt": "?", "options": [{ "value": "a", "label": "A" }], "defaults": ["a"],
    }]});
    let mut ask = approval(&questions);
    ask.kind = ToolKind::Ask;
    let reply = settled(rule(&ask, &Verdict::Skip, &owner(), &two_of_ops()));
    assert_eq!(reply.status, ToolCallStatus::Rejected);
}
