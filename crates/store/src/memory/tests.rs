use super::*;
use crate::test_changes::{park, propose};

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
}

#[test]
fn a_commit_is_all_or_nothing() {
    let engine = MemoryEngine::new();
    let run = engine.start_turn("agent", "hi");
    let ctx = engine.lease(run).expect("queued");
    let entry = Change::Journal {
        position: 0,
        name: "model:0".into(),
        value: json!("x"),
    };
    // A call parked that was never proposed: refused, and the entry
    // before it with it.
    let refused = block_on(engine.commit_changes(&ctx.lease, &[entry.clone(), park("c1")]));
    assert!(
        matches!(refused, Err(Error::NotFound { .. })),
        "{refused:?}"
    );
    let memory = engine.snapshot();
    assert!(memory.journal_names(run).is_empty());
    assert_eq!((memory.commits, memory.refused_commits), (0, 1));
    block_on(engine.commit_changes(
        &ctx.lease,
        &[entry, propose("c1"), park("c1"), Change::WaitRun],
    ))
    .expect("a whole commit");
    let memory = engine.snapshot();
    assert_eq!(memory.journal_names(run), ["model:0"]);
    assert_eq!(
        memory.call(run, "c1").unwrap().state.status(),
        ToolCallStatus::PendingApproval
    );
    assert_eq!(memory.run(run).unwrap().status, RunStatus::Waiting);
}

#[test]
fn a_journal_position_is_written_once_and_in_order() {
    let engine = MemoryEngine::new();
    let run = engine.start_turn("agent", "hi");
    let ctx = engine.lease(run).expect("queued");
    let at = |position: u32| Change::Journal {
        position,
        name: format!("model:{position}"),
        value: json!(position),
    };
    block_on(engine.commit_changes(&ctx.lease, &[at(0)])).expect("the first");
    assert!(block_on(engine.commit_changes(&ctx.lease, &[at(0)])).is_err());
    assert!(block_on(engine.commit_changes(&ctx.lease, &[at(2)])).is_err());
    block_on(engine.commit_changes(&ctx.lease, &[at(1)])).expect("the next");
    assert_eq!(engine.snapshot().journal_names(run), ["model:0", "model:1"]);
}
