//! The inline runner: runs turns in this process (in-process queue, one
//! worker) and hands each open request to host hooks, for embedding and the
//! terminal chat. The durable parts are the same as a fleet's: Postgres
//! holds everything, so a turn interrupted here can be answered elsewhere.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::reply::Verdict;
use agentenkit_core::{Owner, ThreadId, ThreadStatus, ToolKind};
use agentenkit_queue::memory::MemoryQueue;
use agentenkit_queue::QueueAdapter;
use agentenkit_store::{PendingInput, RunView, Store};

use crate::replies::Replies;
use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{Deployment, Error, Registry, Relay, Result, Worker, WorkerConfig};

/// How often a turn in progress asks the store for news of its thread.
const POLL: Duration = Duration::from_millis(10);
/// A turn re-reads its thread at least this often, news or not.
const REREAD: Duration = Duration::from_millis(500);

/// What the host does when a run waits for a person.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// A verdict on an approval (or a job's park).
    async fn await_approval(&self, input: &PendingInput) -> Verdict;

    /// Answers to a question set; `None` when the host cannot render
    /// questions, and the runner then asks `await_approval` instead
    /// (approve = the pre-picked answers, reject = skipped).
    async fn await_answers(&self, _input: &PendingInput) -> Option<Value> {
        None
    }
}

pub struct InlineRunner {
    store: Store,
    /// How the person at this terminal answers: as an API's key of the
    /// owner does, by the run's version of its agent.
    replies: Replies,
    owner: Owner,
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
}

impl InlineRunner {
    /// Starts a worker on an in-process queue. Runs left queued by an
    /// earlier process are picked up by a reaper pass, not by this one.
    pub fn start(store: Store, registry: Arc<Registry>, owner: Owner) -> InlineRunner {
        let queue: Arc<dyn QueueAdapter> = Arc::new(MemoryQueue::new());
        // One deployment for the worker and the person at the terminal:
        // what either writes is published on the in-process queue, and
        // the events they claim are sent from here.
        let deployment = Deployment::assemble(
            store,
            Relay::new(queue),
            registry,
            crate::notify::DEFAULT_CONCURRENCY,
        );
        let worker = Worker::new(&deployment, WorkerConfig::default());
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let worker = tokio::spawn(async move {
            if let Err(e) = worker.run(token).await {
                tracing::error!(error = %e, "inline worker stopped");
            }
        });
        InlineRunner {
            replies: deployment.replies(),
            store: deployment.store().clone(),
            owner,
            shutdown,
            worker,
        }
    }

    pub async fn create_thread(&self, agent: &str) -> Result<ThreadId> {
        Ok(self
            .store
            .create_thread(&self.owner, agent, &serde_json::json!({}))
            .await?
            .id)
    }

    /// Runs one turn to its end, asking `hooks` for every open request, and
    /// then the turns queued behind it meanwhile (`onActive: "enqueue"`;
    /// this turn too waits behind a run already working). Returns the last
    /// run's view.
    pub async fn run_turn(
        &self,
        thread: ThreadId,
        content: &str,
        hooks: &dyn Hooks,
    ) -> Result<RunView> {
        // Watch before starting, so no event of this turn goes unseen.
        let mut watch = self.store.event_watch().await.ok();
        // A turn typed here is a trace's root, as a request to the API is.
        let turn = crate::trace::turn_span(thread);
        let started = self
            .store
            .post_turn(
                thread,
                &self.owner,
                content,
                agentenkit_store::Arrival::Enqueue,
                crate::trace::of(&turn).as_ref(),
            )
            .instrument(turn)
            .await?;
        loop {
            let view = self.store.get_thread(thread, &self.owner).await?;
            match view.status {
                // A queued turn starts right after the run before it ends.
                ThreadStatus::Idle if view.queued_messages.is_empty() => {
                    let last = view.current_run_id.unwrap_or(started.run_id);
                    return Ok(self.store.get_run(last, &self.owner).await?);
                }
                ThreadStatus::Idle => {}
                ThreadStatus::WaitingForInput => {
                    // A server's task ends on its own: a worker checks on it.
                    let for_people: Vec<&PendingInput> = view
                        .pending_inputs
                        .iter()
                        .filter(|input| !is_task_wait(input))
                        .collect();
                    for input in &for_people {
                        let verdict = match input.kind {
                            ToolKind::Ask => match hooks.await_answers(input).await {
                                Some(answers) => Verdict::Answer { answers },
                                // A host without a form: approve confirms the
                                // pre-picked answers, reject skips.
                                None => hooks.await_approval(input).await,
                            },
                            _ => hooks.await_approval(input).await,
                        };
                        self.answer(input, verdict).await?;
                    }
                    if !for_people.is_empty() {
                        continue;
                    }
                }
                ThreadStatus::Running => {}
            }
            // Wait for news of this thread (or re-read after a while).
            let deadline = tokio::time::Instant::now() + REREAD;
            while tokio::time::Instant::now() < deadline {
                tokio::time::sleep(POLL).await;
                let Some(w) = watch.as_mut() else { continue };
                match self.store.poll_events(w).await {
                    Ok(threads) if threads.contains(&thread) => break,
                    Ok(_) => {}
                    Err(_) => watch = None,
                }
            }
        }
    }

    async fn answer(&self, input: &PendingInput, verdict: Verdict) -> Result<()> {
        // The person at this terminal answers alone, as the owner.
        let answered = self
            .replies
            .settle(&self.owner, input.run_id, &input.tool_call_id, verdict)
            .await?;
        if let Some(error) = answered.error {
            tracing::info!(tool_call_id = %input.tool_call_id, %error, "reply not delivered");
        }
        Ok(())
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Stops the worker (in-flight segments get its shutdown grace).
    pub async fn shutdown(self) -> Result<()> {
        self.shutdown.cancel();
        self.worker
            .await
            .map_err(|e| Error::Config(format!("inline worker panicked: {e}")))
    }
}

/// Whether `input` is a call's wait for an MCP server's task, which a
/// worker checks on and ends: nothing for the person at the terminal.
fn is_task_wait(input: &PendingInput) -> bool {
    input.kind == ToolKind::Park && input.reason.as_deref() == Some(crate::mcp::TASK_REASON)
}
