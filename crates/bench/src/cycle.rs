//! The cycle the bench measures, as the clients drive it: park N runs (a
//! thread, a turn, its segment published; parked when the worker acks),
//! then approve them (the answer, its resume segment; done when the tool ran
//! and the last segment was acked), fanned out over `c` client tasks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentenkit_core::{Owner, QueueMessage, RunId};
use agentenkit_queue::QueueAdapter;
use agentenkit_runtime::replies::{Approve, Replies};
use agentenkit_runtime::{Deployment, Registry, Relay, Worker, WorkerConfig};
use agentenkit_store::{OutboxRow, Store};
use anyhow::{bail, Context};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::hub::{HookedQueue, Hub, Key};

/// How long a client waits for a run to park, resume or complete.
const WAIT: Duration = Duration::from_secs(60);

/// What the client tasks share.
pub struct Ctx {
    /// The queue as the worker and clients use it, counting publishes.
    pub hooked: Arc<HookedQueue>,
    /// The clients' store: it publishes what its calls write to the
    /// outbox through the hooked queue.
    pub store: Store,
    /// How the clients answer: the product's one answer path, over `store`.
    pub replies: Replies,
    /// What `store` and `replies` are of: the clients' process.
    pub deployment: Deployment,
    pub hub: Arc<Hub>,
    pub owner: Owner,
    pub content: String,
}

#[derive(Clone, Copy)]
pub struct Parked {
    pub run: RunId,
}

/// A worker of the bench, running until stopped.
pub struct RunningWorker {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), agentenkit_runtime::worker::WorkerError>>,
}

impl RunningWorker {
    pub async fn stop(self) {
        self.shutdown.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("worker: {e}"),
            Err(e) => eprintln!("worker task: {e}"),
        }
    }
}

pub fn start_worker(ctx: &Ctx, registry: Arc<Registry>, prefetch: u16) -> RunningWorker {
    let queue: Arc<dyn QueueAdapter> = ctx.hooked.clone();
    let config = WorkerConfig {
        prefetch,
        shutdown_grace: Duration::from_secs(5),
        ..WorkerConfig::default()
    };
    // A deployment of its own on the clients' store, as a worker process
    // of the same agent file would have.
    let deployment = Deployment::assemble(
        ctx.deployment.connected().clone(),
        Relay::new(queue),
        registry,
        usize::from(config.notify_prefetch),
    );
    let worker = Worker::new(&deployment, config);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    RunningWorker {
        shutdown,
        task: tokio::spawn(async move { worker.run(token).await }),
    }
}

/// The segment a commit wrote to the outbox.
pub fn segment_seq(outbox: &[OutboxRow], run: RunId) -> anyhow::Result<i64> {
    outbox
        .iter()
        .find_map(|row| match row.message {
            QueueMessage::Segment { run_id, seq } if run_id == run => Some(seq),
            _ => None,
        })
        .with_context(|| format!("no segment of run {run} in the outbox"))
}

/// Runs `per_item(i)` for i in 0..n on `c` tasks (task w takes w, w+c, …);
/// returns the results in item order and the wall time.
pub async fn fan_out<T, F, Fut>(
    n: usize,
    c: usize,
    per_item: F,
) -> anyhow::Result<(Vec<T>, Duration)>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send,
{
    let per_item = Arc::new(per_item);
    let start = Instant::now();
    let tasks: Vec<_> = (0..c)
        .map(|w| {
            let per_item = per_item.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in (w..n).step_by(c) {
                    out.push((i, per_item(i).await?));
                }
                anyhow::Ok(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for task in tasks {
        all.extend(task.await.context("client task")??);
    }
    let wall = start.elapsed();
    all.sort_by_key(|(i, _)| *i);
    Ok((all.into_iter().map(|(_, t)| t).collect(), wall))
}

/// Per-item durations as sorted columns (column j = item[j] of every row).
pub fn columns(rows: Vec<Vec<Duration>>) -> Vec<Vec<Duration>> {
    let width = rows.first().map_or(0, Vec::len);
    (0..width)
        .map(|j| {
            let mut column: Vec<Duration> = rows.iter().filter_map(|r| r.get(j).copied()).collect();
            column.sort();
            column
        })
        .collect()
}

/// Phase A: create a thread, start a turn (the store publishes its
/// segment); parked when the worker acks the first segment. Columns:
/// create_thread call → that ack; store calls (create_thread, start_run,
/// its publish confirmed included); start_run call → the worker got the
/// segment; worker got it → acked.
pub async fn park_phase(
    ctx: &Arc<Ctx>,
    n: usize,
    c: usize,
) -> anyhow::Result<(Vec<Parked>, Vec<Vec<Duration>>, Duration)> {
    let ctx = ctx.clone();
    let (items, wall) = fan_out(n, c, move |_| {
        let ctx = ctx.clone();
        async move {
            let t0 = Instant::now();
            let thread = ctx
                .store
                .create_thread(&ctx.owner, "mailer", &json!({}))
                .await?;
            let starting = Instant::now();
            let started = ctx
                .store
                .start_run(thread.id, &ctx.owner, &ctx.content, None)
                .await?;
            let stored = Instant::now();
            let run = started.run_id;
            let seq = segment_seq(&started.outbox, run)?;
            let parked = ctx.hub.wait(Key::Acked(run, seq), WAIT).await?;
            let delivered = ctx.hub.wait(Key::Delivered(run, seq), WAIT).await?;
            anyhow::Ok((
                Parked { run },
                vec![
                    parked.saturating_duration_since(t0),
                    stored - t0,
                    delivered.saturating_duration_since(starting),
                    parked.saturating_duration_since(delivered),
                ],
            ))
        }
    })
    .await?;
    let (parked, rows): (Vec<_>, Vec<_>) = items.into_iter().unzip();
    Ok((parked, columns(rows), wall))
}

/// Phase B: approve each parked call (the store publishes the resume
/// segment). Columns: answer call → tool ran; answer call → last segment
/// acked; the answer call (its publish confirmed included); answer call →
/// the worker got the segment; worker got it → the tool ran; tool ran →
/// acked.
pub async fn resume_phase(
    ctx: &Arc<Ctx>,
    parked: &[Parked],
    c: usize,
) -> anyhow::Result<(Vec<Vec<Duration>>, Duration)> {
    let ctx = ctx.clone();
    let parked: Arc<Vec<Parked>> = Arc::new(parked.to_vec());
    let (rows, wall) = fan_out(parked.len(), c, move |i| {
        let ctx = ctx.clone();
        let run = parked[i].run;
        async move {
            let t0 = Instant::now();
            let answered = approve_c1(&ctx.replies, &ctx.owner, run).await?;
            let stored = Instant::now();
            let seq = segment_seq(&answered.outbox, run)?;
            let executed = ctx.hub.wait(Key::Executed(run), WAIT).await?;
            let completed = ctx.hub.wait(Key::Acked(run, seq), WAIT).await?;
            let delivered = ctx.hub.wait(Key::Delivered(run, seq), WAIT).await?;
            anyhow::Ok(vec![
                executed.saturating_duration_since(t0),
                completed.saturating_duration_since(t0),
                stored - t0,
                delivered.saturating_duration_since(t0),
                executed.saturating_duration_since(delivered),
                completed.saturating_duration_since(executed),
            ])
        }
    })
    .await?;
    Ok((columns(rows), wall))
}

/// Approves call `c1` of `run` as `owner`, as the clients of every pass do,
/// through the answer path of the API and the library (`Replies`); a
/// refusal is an error.
pub(crate) async fn approve_c1(
    replies: &Replies,
    owner: &Owner,
    run: RunId,
) -> anyhow::Result<agentenkit_store::Answered> {
    let answered = replies
        .approve(owner, run, "c1", Approve::default())
        .await?;
    if !answered.delivered {
        bail!("answer to run {run} refused: {:?}", answered.error);
    }
    Ok(answered)
}
