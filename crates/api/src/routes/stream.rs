//! `GET /threads/{id}/stream`: Server-Sent Events, `id:` = event id,
//! resuming after `Last-Event-ID` (or `?after=`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use agentenkit_core::{Owner, ThreadId};
use agentenkit_store::EventView;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;

use crate::auth::{Caller, Read, RouteScope};
use crate::extract::{parse_event_id, parse_id, PathText, QueryParams};
use crate::hub::Subscription;
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// What one read of a stream's events holds: it is buffered until sent.
const PAGE: i64 = 500;
const PAGE_BYTES: usize = 1 << 20;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Start after this event id when no `Last-Event-ID` is sent.
    #[param(value_type = Option<i64>, minimum = 0, nullable = false)]
    after: Option<String>,
}

/// The thread's events live, as Server-Sent Events: `id:` is the event id,
/// `event:` its type, `data:` the event as JSON. Reconnect with
/// `Last-Event-ID` to resume; runs are reclaimed on connect.
#[utoipa::path(get, path = "/threads/{id}/stream", tag = "threads",
    params(
        ("id" = ThreadId, Path, description = "The thread"),
        ("Last-Event-ID" = Option<i64>, Header, minimum = 0, nullable = false,
            description = "Resume after this event id (wins over `after`)"),
        StreamQuery,
    ),
    responses(
        (status = 200, content_type = "text/event-stream", body = crate::schemas::StreamEvent),
        (status = 400, description = "`Last-Event-ID` or `after` is not an event id", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 429, description = "The key holds too many open streams", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    PathText(id): PathText,
    QueryParams(query): QueryParams<StreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    caller.require(Read::SCOPE)?;
    let owner = caller.owner.clone();
    let thread: ThreadId = parse_id(&id, "thread")?;
    // Ownership first: another owner's thread is a 404, not an empty stream.
    state.store.get_thread(thread, &owner).await?;
    crate::reclaim_on_connect(&state, agentenkit_store::Scope::Thread(thread)).await;
    // Both are checked when both are sent; the header (what a reconnecting
    // client knows last) wins.
    let after_query = match query.after.as_deref() {
        None => 0,
        Some(text) => parse_event_id(text, "after")?,
    };
    let after = match headers.get("last-event-id").map(|v| v.to_str()) {
        Some(Ok(text)) => parse_event_id(text, "Last-Event-ID")?,
        Some(Err(_)) => return Err(ApiError::BadRequest("Last-Event-ID is not text".into())),
        None => after_query,
    };
    // Subscribe before the first read, so no event falls between the two.
    let wake = state
        .hub
        .subscribe(thread, &owner)
        .await
        .map_err(|too_many| {
            ApiError::TooManyRequests(format!(
                "the owner of this key already holds {} open streams (counted over all its keys); close one first",
                too_many.max
            ))
        })?;
    let ends_at = tokio::time::Instant::now() + state.stream_lifetime;
    let cursor = Cursor {
        state,
        caller,
        ends_at,
        owner,
        thread,
        after,
        buffered: VecDeque::new(),
        wake,
    };
    let events = futures::stream::unfold(cursor, |mut cursor| async move {
        let event = cursor.next().await?;
        Some((Ok(event), cursor))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Cursor {
    state: AppState,
    /// Asked again at every wake-up whether its key still holds.
    caller: Caller,
    /// When the stream ends whatever happens (`stream_lifetime`).
    ends_at: tokio::time::Instant,
    owner: Owner,
    thread: ThreadId,
    after: i64,
    buffered: VecDeque<EventView>,
    wake: Subscription,
}

impl Cursor {
    /// The next event, waiting for one if need be; `None` ends the stream
    /// (the thread is gone or the store failed: the client reconnects).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(view) = self.buffered.pop_front() {
                self.after = view.id;
                let data = serde_json::to_string(&view).ok()?;
                return Some(
                    Event::default()
                        .id(view.id.to_string())
                        .event(view.event_type.as_str())
                        .data(data),
                );
            }
            // Before every read, not only after a wait: a stream with a
            // backlog (or a busy thread) never waits, and a revoked key or
            // a stream past its lifetime must still end.
            if !self.may_go_on().await {
                return None;
            }
            // Wake-ups from here on are news this read may not include.
            self.wake.mark_seen();
            // A thread's event ids are handed out in commit order, so what
            // a read sees is a prefix of what will ever be there: reading
            // past the last id seen never skips an event.
            match self
                .state
                .store
                .list_events(
                    self.thread,
                    &self.owner,
                    self.after,
                    agentenkit_store::ReadBound::new(PAGE, PAGE_BYTES),
                )
                .await
            {
                Ok(events) if !events.items.is_empty() => {
                    self.buffered.extend(events.items);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(thread_id = %self.thread, error = %e, "event stream ends");
                    return None;
                }
            }
            if !self.wait().await {
                return None;
            }
        }
    }

    /// Until this thread has news, or the re-read timer fires; `false`
    /// when the stream ends: the server is stopping or the stream lived
    /// its time (its key is asked before the next read).
    async fn wait(&mut self) -> bool {
        tokio::select! {
            () = self.state.shutdown.cancelled() => false,
            () = tokio::time::sleep_until(self.ends_at) => false,
            _ = tokio::time::timeout(self.state.stream_reread, self.wake.changed()) => true,
        }
    }

    /// Whether the stream may read on: the server is not stopping, the
    /// stream has not lived its time, and its key still holds (the key
    /// cache's answer: one lookup per few seconds at most).
    async fn may_go_on(&self) -> bool {
        !self.state.shutdown.is_cancelled()
            && tokio::time::Instant::now() < self.ends_at
            && self.caller.still_valid(&self.state).await
    }
}
