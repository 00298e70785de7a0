//! `POST /agent/decisions`: many decisions at once, each settled on its own
//! (its own transaction, its own result), idempotent under retry with an
//! `Idempotency-Key` header.

use std::collections::BTreeMap;

use agentenkit_core::canonical::arguments_hash;
use agentenkit_core::ToolCallId;
use agentenkit_runtime::replies::Decision;
use agentenkit_store::{Claim, Hold, RecordedItem};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::answers::{Answer, Approve, Decided, Delivery, Reject, Skip};
use crate::auth::{Approvals, Caller, Responder};
use crate::extract::JsonBody;
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// At most this many decisions in one request.
pub const MAX_DECISIONS: usize = 100;

/// The longest `Idempotency-Key` taken.
const MAX_KEY_BYTES: usize = 255;

/// One decision: `action` says which, the rest is the body the single
/// route (`/agent/tool-call/approve`, `reject`, `answer`, `skip`) takes.
#[derive(Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum DecisionItem {
    Approve(Approve),
    Deny(Reject),
    Answer(Answer),
    Skip(Skip),
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Decisions {
    /// Settled in order, each on its own: one that fails changes nothing of
    /// the others.
    #[schema(min_items = 1, max_items = 100)]
    decisions: Vec<DecisionItem>,
}

/// What became of one decision: the status and body its single route
/// would have answered (`Delivery`, or `ErrorBody` for a 4xx).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionResult {
    status: u16,
    #[schema(value_type = Object)]
    body: Value,
}

#[derive(Serialize, ToSchema)]
pub struct DecisionResults {
    /// One per decision, in the request's order.
    results: Vec<DecisionResult>,
}

/// A refused item's message as an idempotency record keeps it.
const KEPT_MESSAGE_CHARS: usize = 200;

impl DecisionResults {
    /// What an idempotency record keeps of these results for 24 hours: a
    /// refused item's status, code and the start of its message (not its
    /// issues), so a record stays small whatever the request held.
    fn as_kept(&self) -> DecisionResults {
        let results = self
            .results
            .iter()
            .map(|result| DecisionResult {
                status: result.status,
                body: if result.status == StatusCode::OK.as_u16() {
                    result.body.clone()
                } else {
                    json!({
                        "error": result.body["error"],
                        "message": agentenkit_core::questions::clip(
                            result.body["message"].as_str().unwrap_or_default(),
                            KEPT_MESSAGE_CHARS,
                        ),
                    })
                },
            })
            .collect();
        DecisionResults { results }
    }
}

/// Decides many open requests at once (approve, deny, answer or skip
/// each). Every decision is settled on its own, as its single route would
/// settle it, and gets its own result; the request is 200 whatever they
/// are. With an `Idempotency-Key` header a retry is safe: the same key with
/// the same body gets the same results (a retry after a cut-off attempt
/// settles what that attempt did not); with another body, 422.
#[utoipa::path(post, path = "/agent/decisions", tag = "replies",
    request_body = Decisions,
    params(("Idempotency-Key" = Option<crate::schemas::IdempotencyKeyText>, Header,
        description = "1 to 255 visible ASCII characters; kept 24 hours for the caller")),
    responses(
        (status = 200, body = DecisionResults, headers(("Idempotent-Replayed" = String,
            description = "`true` when this is the stored response of an earlier request with the key"))),
        (status = 400, description = "Malformed JSON, no decisions or more than 100, or a malformed `Idempotency-Key`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 409, description = "`IdempotencyKeyInUse`: a request with this key is being processed now; retry after `Retry-After`", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`IdempotencyKeyReused`: the key was used with another body", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, description = "The database failed during the batch: what was settled stands; retry with the same key", body = ErrorBody),
    ))]
// `Responder`: a key that can answer nothing is refused before its body
// is read, so before it can hold an idempotency key.
pub async fn decide(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Approvals>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, ApiError> {
    let owner = caller.owner.clone();
    // A key's batches are its own: two people of one owner sending the
    // same key must not get each other's results (nor votes go uncounted).
    let key = idempotency_key(&headers)?.map(|key| match &caller.approver.key_id {
        Some(id) => format!("{id}/{key}"),
        None => key,
    });
    let request_hash = arguments_hash(&body);
    let decisions: Decisions = serde_json::from_value(body).map_err(|e| {
        ApiError::BadRequest(
            crate::free_form::refusal(&e).unwrap_or_else(|| format!("invalid JSON body: {e}")),
        )
    })?;
    let count = decisions.decisions.len();
    if !(1..=MAX_DECISIONS).contains(&count) {
        return Err(ApiError::BadRequest(format!(
            "decisions must hold 1 to {MAX_DECISIONS} items, not {count}"
        )));
    }
    // An item that cannot be read makes the request one that cannot be
    // read: nothing is settled.
    let decisions = decisions
        .decisions
        .into_iter()
        .enumerate()
        .map(|(index, item)| readable(index, item))
        .collect::<Result<Vec<Decided>, ApiError>>()?;
    let Some(key) = key else {
        let results = settle_all(&state, &caller, decisions, None, BTreeMap::new()).await?;
        return Ok(Json(results).into_response());
    };
    let claim = state
        .store
        .claim_idempotency_key(&owner, &key, &request_hash, state.idempotency)
        .await?;
    let (recorded, hold) = match claim {
        Claim::Process { recorded, hold } => (recorded, hold),
        other => return not_processed(other),
    };
    match settle_all(&state, &caller, decisions, Some((&key, hold)), recorded).await {
        Ok(results) => {
            let response =
                serde_json::to_value(&results).map_err(|e| ApiError::Internal(e.to_string()))?;
            let kept = serde_json::to_value(results.as_kept())
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            let kept_now = state
                .store
                .complete_idempotency_key(&owner, &key, hold, StatusCode::OK.as_u16(), &kept)
                .await?;
            if !kept_now {
                return Err(ApiError::from(
                    agentenkit_store::Error::IdempotencyKeyTakenOver { key },
                ));
            }
            Ok(Json(response).into_response())
        }
        Err(failed) => {
            // What was settled stands and is recorded: a retry with the key
            // may start at once and settles the rest (unless one took the
            // key over already: then the release changes nothing).
            if let Err(e) = state
                .store
                .release_idempotency_key(&owner, &key, hold)
                .await
            {
                tracing::warn!(error = %e, "could not release an idempotency key; it goes stale");
            }
            Err(failed)
        }
    }
}

/// The answer to a batch whose idempotency key says not to process it:
/// the response kept for it, or why it must wait or use another key.
fn not_processed(claim: Claim) -> Result<Response, ApiError> {
    match claim {
        Claim::Completed { status, response } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let mut response = (status, Json(response)).into_response();
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(response)
        }
        Claim::InProgress => Err(ApiError::Conflict {
            code: "IdempotencyKeyInUse",
            message: "a request with this Idempotency-Key is being processed; retry shortly".into(),
        }),
        Claim::Mismatch => Err(ApiError::Unprocessable {
            code: "IdempotencyKeyReused",
            message: "this Idempotency-Key was used with another request body; use a new key"
                .into(),
        }),
        Claim::Process { .. } => Err(ApiError::Internal(
            "a batch claimed for processing was answered as not processed".into(),
        )),
    }
}

/// Settles every decision in order. A decision the caller got wrong (4xx)
/// is its result; a failure of the database ends the batch with it.
async fn settle_all(
    state: &AppState,
    caller: &Caller,
    decisions: Vec<Decided>,
    key: Option<(&str, Hold)>,
    recorded: BTreeMap<usize, Value>,
) -> Result<DecisionResults, ApiError> {
    let replies = state.replies_of(caller);
    let owner = &caller.owner;
    let mut results = Vec::with_capacity(decisions.len());
    for (index, decided) in decisions.into_iter().enumerate() {
        if let Some(result) = recorded.get(&index) {
            results.push(DecisionResult {
                status: StatusCode::OK.as_u16(),
                body: result.clone(),
            });
            continue;
        }
        // Written with the answer, when it is delivered.
        let delivered = json!(Delivery::delivered());
        let record = key.map(|(key, hold)| RecordedItem {
            key,
            hold,
            index,
            result: &delivered,
        });
        let outcome = replies
            .decide(owner, decided.run, &decided.call, decided.decision, record)
            .await
            .map_err(ApiError::from);
        let (status, body) = match outcome {
            Ok(answered) => (StatusCode::OK, json!(Delivery::from(answered))),
            // A failed database, or a retry that took the key over: the
            // batch ends (what was settled stands).
            Err(
                e @ (ApiError::Unavailable(_)
                | ApiError::Internal(_)
                | ApiError::Conflict {
                    code: "IdempotencyKeyTakenOver",
                    ..
                }),
            ) => return Err(e),
            Err(e) => e.status_and_body(),
        };
        results.push(DecisionResult {
            status: status.as_u16(),
            body,
        });
    }
    Ok(DecisionResults { results })
}

/// Item `index` as a decision, checked as the document describes it: a run
/// id, a tool call id, an `argumentsHash` and answers of the right shape,
/// else 400 naming the item.
fn readable(index: usize, item: DecisionItem) -> Result<Decided, ApiError> {
    let at = |message: String| ApiError::BadRequest(format!("decisions[{index}]: {message}"));
    let decided = match item {
        DecisionItem::Approve(body) => body.decision(),
        DecisionItem::Deny(body) => body.decision(),
        DecisionItem::Answer(body) => body.decision(),
        DecisionItem::Skip(body) => body.decision(),
    }
    .map_err(|e| match e {
        ApiError::NotFound(_) => at("runId is not a run id".into()),
        ApiError::BadRequest(message) => at(message),
        other => other,
    })?;
    if let Err(invalid) = ToolCallId::check(&decided.call) {
        return Err(at(format!("toolCallId: {invalid}")));
    }
    if let Decision::Answer(answers) = &decided.decision {
        let is_map = answers.as_object().is_some_and(|map| {
            map.values().all(|values| {
                values
                    .as_array()
                    .is_some_and(|values| values.iter().all(Value::is_string))
            })
        });
        if !is_map {
            return Err(at(
                "answers must be an object of question id → array of strings".into(),
            ));
        }
    }
    Ok(decided)
}

/// The `Idempotency-Key` header, when there is one: 1 to 255 visible ASCII
/// characters.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::BadRequest(
            "more than one Idempotency-Key header".into(),
        ));
    }
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_KEY_BYTES
        || !bytes.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(ApiError::BadRequest(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_BYTES} visible ASCII characters"
        )));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(value: &[u8]) -> Result<Option<String>, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "idempotency-key",
            HeaderValue::from_bytes(value).expect("a header value"),
        );
        idempotency_key(&headers)
    }

    #[test]
    fn keys_are_visible_ascii_of_bounded_length() {
        assert_eq!(idempotency_key(&HeaderMap::new()).unwrap(), None);
        assert_eq!(key(b"batch-7f3a").unwrap().as_deref(), Some("batch-7f3a"));
        assert!(key(b"").is_err());
        assert!(key(b"a b").is_err());
        assert!(key("é".as_bytes()).is_err());
        assert!(key(&[b'k'; 255]).is_ok());
        assert!(key(&[b'k'; 256]).is_err());
        let mut two = HeaderMap::new();
        two.append("idempotency-key", HeaderValue::from_static("a"));
        two.append("idempotency-key", HeaderValue::from_static("b"));
        assert!(idempotency_key(&two).is_err());
    }

    #[test]
    fn items_are_told_apart_by_action_and_checked_like_their_routes() {
        let parsed: Decisions = serde_json::from_value(json!({ "decisions": [
            { "action": "approve", "runId": "r", "toolCallId": "c1", "message": "ok" },
            { "action": "deny", "runId": "r", "toolCallId": "c2", "reason": "no" },
            { "action": "answer", "runId": "r", "toolCallId": "c3", "answers": {} },
            { "action": "skip", "runId": "r", "toolCallId": "c4" },
        ]}))
        .unwrap();
        assert!(matches!(
            parsed.decisions[..],
            [
                DecisionItem::Approve(_),
                DecisionItem::Deny(_),
                DecisionItem::Answer(_),
                DecisionItem::Skip(_)
            ]
        ));
        for bad in [
            json!({ "decisions": [{ "action": "maybe", "runId": "r", "toolCallId": "c" }] }),
            json!({ "decisions": [{ "runId": "r", "toolCallId": "c" }] }),
            json!({ "decisions": [{ "action": "skip", "runId": "r", "toolCallId": "c", "extra": 1 }] }),
            json!({ "decisions": [{ "action": "deny", "runId": "r", "toolCallId": "c", "message": "x" }] }),
            json!({ "decisions": {} }),
            json!({ "decisions": [], "more": 1 }),
        ] {
            assert!(
                serde_json::from_value::<Decisions>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_header_value_is_taken_or_refused_never_a_panic(value in prop::collection::vec(any::<u8>(), 0..300)) {
            let Ok(header) = HeaderValue::from_bytes(&value) else { return Ok(()) };
            let mut headers = HeaderMap::new();
            headers.insert("idempotency-key", header);
            let taken = idempotency_key(&headers);
            let visible = !value.is_empty() && value.len() <= MAX_KEY_BYTES
                && value.iter().all(|b| (0x21..=0x7e).contains(b));
            prop_assert_eq!(taken.is_ok(), visible);
        }
    }
}
