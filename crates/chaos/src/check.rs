//! The checker: from the outside (the events every thread shows through the
//! API, the answers the clients got, the calls the tool endpoint counted)
//! it decides whether anything was lost, doubled, early or stuck.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::load::{RunRecord, Scenario};
use super::tools::Endpoint;

/// (runId, toolCallId): one request.
type Key = (String, String);

/// What one thread's events say.
#[derive(Debug, Default)]
pub struct ThreadEvents {
    /// The events, in order, as the API lists them.
    pub events: Vec<Value>,
}

/// The verdicts. Each list names what broke, one line per case.
#[derive(Debug, Default)]
pub struct Findings {
    pub runs: usize,
    pub completed: usize,
    /// A run that ended other than `completed`, with its status.
    pub failed: Vec<String>,
    /// A run whose client saw no end by the deadline (or gave up).
    pub stuck: Vec<String>,
    pub requests: usize,
    /// A request never resolved.
    pub unresolved: Vec<String>,
    /// A request resolved twice, a run finished twice, an answer delivered
    /// twice, an effect with no approval behind it.
    pub doubled: Vec<String>,
    /// An answer that got `delivered: true` and was not what settled the
    /// request; an approved call whose effect never happened.
    pub lost: Vec<String>,
    /// An expiry before its `expiresAt`, or of a request that should not
    /// have expired.
    pub early: Vec<String>,
    /// An answer status no client should get (a 4xx on a valid answer).
    pub unexpected: Vec<String>,
    pub answers_sent: usize,
    pub delivered: usize,
    pub too_late: usize,
    pub approved_sends: usize,
    pub send_keys: usize,
    pub send_calls: u64,
    pub approved_jobs: usize,
    pub job_keys: usize,
    pub job_calls: u64,
    /// Effects repeated with the same idempotency key (a kill between the
    /// tool's answer and the journal commit): allowed, reported apart.
    pub repeats: Vec<String>,
    pub expiries: usize,
    /// From a request's last answer to its run's end, the slowest.
    pub slowest_settle: Option<(Duration, String)>,
    /// From `expiresAt` to the expiry, the slowest.
    pub slowest_expiry: Option<Duration>,
}

impl Findings {
    pub fn violations(&self) -> usize {
        self.failed.len()
            + self.stuck.len()
            + self.unresolved.len()
            + self.doubled.len()
            + self.lost.len()
            + self.early.len()
            + self.unexpected.len()
    }
}

struct Resolution {
    status: String,
    approved: bool,
    at: Option<DateTime<Utc>>,
}

/// Checks every run against its thread's events and the tool endpoint's
/// counts (`effects`: calls per idempotency key that carried an approval;
/// `unapproved`: calls that carried none, or a denial, where one is needed).
pub fn check(
    records: &[RunRecord],
    events: &BTreeMap<String, ThreadEvents>,
    effects: &BTreeMap<Endpoint, BTreeMap<String, u64>>,
    unapproved: &[String],
) -> Findings {
    let mut f = Findings {
        runs: records.len(),
        ..Findings::default()
    };
    f.doubled.extend(unapproved.iter().cloned());
    let mut approved_effects: BTreeMap<Endpoint, BTreeSet<String>> = BTreeMap::new();
    for record in records {
        let name = format!("run {} ({:?})", record.index, record.scenario);
        match record.finished.as_deref() {
            Some("completed") => f.completed += 1,
            Some(other) => f.failed.push(format!("{name}: {other}")),
            None => f.stuck.push(format!(
                "{name}: thread {} run {} did not end{}",
                record.thread_id.as_deref().unwrap_or("-"),
                record.run_id.as_deref().unwrap_or("-"),
                record
                    .error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )),
        }
        let Some(thread) = record.thread_id.as_ref().and_then(|t| events.get(t)) else {
            continue;
        };
        let (required, resolved, finished) = read_events(record, thread);
        for (run, count) in &finished {
            if *count > 1 {
                f.doubled
                    .push(format!("{name}: run {run} ended {count} times"));
            }
        }
        // Every run of the tree (sub-agents too) must complete: a failed
        // child leaves a parent that still says "Done.".
        for event in &thread.events {
            if matches!(event["type"].as_str(), Some("RUN_FAILED" | "RUN_CANCELLED")) {
                f.failed.push(format!(
                    "{name}: run {} {}: {}",
                    event["runId"].as_str().unwrap_or("-"),
                    event["type"].as_str().unwrap_or_default(),
                    event["data"]["error"]
                ));
            }
        }
        if record.finished.as_deref() == Some("completed") {
            let root = record.run_id.as_deref().unwrap_or_default();
            let ends = thread
                .events
                .iter()
                .filter(|e| e["type"] == "RUN_COMPLETED" && e["runId"] == root)
                .count();
            if ends == 0 {
                f.lost.push(format!(
                    "{name}: completed, but its RUN_COMPLETED event is missing"
                ));
            }
        }
        f.requests += required.len();
        let mut last_answer: Option<DateTime<Utc>> = None;
        for (key, expires_at) in &required {
            let label = format!("{name}: request {}/{}", key.0, key.1);
            let resolutions = resolved.get(key).map(Vec::as_slice).unwrap_or_default();
            let resolution = match resolutions {
                [] => {
                    if record.finished.is_some() {
                        f.unresolved.push(format!("{label} never resolved"));
                    }
                    continue;
                }
                [one] => one,
                [first, ..] => {
                    f.doubled
                        .push(format!("{label} resolved {} times", resolutions.len()));
                    first
                }
            };
            let attempts: Vec<_> = record
                .attempts
                .iter()
                .filter(|a| a.run_id == key.0 && a.tool_call_id == key.1)
                .collect();
            f.answers_sent += attempts.len();
            for attempt in &attempts {
                match (attempt.status, attempt.delivered) {
                    (Some(200), Some(true)) => f.delivered += 1,
                    (Some(200), Some(false)) => f.too_late += 1,
                    // The client's patience ran out: counted by the client.
                    (None, _) => {}
                    (status, _) => f
                        .unexpected
                        .push(format!("{label}: {:?} answered {status:?}", attempt.sent)),
                }
            }
            let delivered: Vec<_> = attempts
                .iter()
                .filter(|a| a.delivered == Some(true))
                .collect();
            if delivered.len() > 1 {
                f.doubled.push(format!(
                    "{label}: {} answers got delivered: true",
                    delivered.len()
                ));
            }
            if resolution.status == "expired" {
                f.expiries += 1;
                match (record.scenario, expires_at, resolution.at) {
                    (Scenario::Expiry, Some(due), Some(at)) if at < *due => f.early.push(format!(
                        "{label} expired at {at}, before its expiresAt {due}"
                    )),
                    (Scenario::Expiry, Some(due), Some(at)) => {
                        let late = (at - *due).to_std().unwrap_or_default();
                        f.slowest_expiry = f.slowest_expiry.max(Some(late));
                    }
                    (Scenario::Expiry, _, _) => {}
                    _ => f.early.push(format!(
                        "{label} expired although a client answered it ({} answers)",
                        attempts.len()
                    )),
                }
            } else {
                if record.scenario == Scenario::Expiry {
                    f.doubled.push(format!(
                        "{label}: settled {} without an answer",
                        resolution.status
                    ));
                }
                if let Some(winner) = delivered.first() {
                    if winner.sent.approves() != resolution.approved {
                        f.lost.push(format!(
                            "{label}: {:?} got delivered: true but the request settled {} (approved: {})",
                            winner.sent, resolution.status, resolution.approved
                        ));
                    }
                } else if !attempts
                    .iter()
                    .any(|a| a.sent.approves() == resolution.approved)
                {
                    f.doubled.push(format!(
                        "{label}: settled approved={} which no client sent",
                        resolution.approved
                    ));
                }
                last_answer = last_answer.max(resolution.at);
            }
            let tool = tool_of(record.scenario, &key.1);
            if let Some(endpoint) = tool {
                let effect_key = format!("{}:{}", key.0, key.1);
                let done = effects
                    .get(&endpoint)
                    .and_then(|e| e.get(&effect_key))
                    .copied()
                    .unwrap_or(0);
                if resolution.approved && resolution.status != "expired" {
                    approved_effects
                        .entry(endpoint)
                        .or_default()
                        .insert(effect_key.clone());
                    if done == 0 {
                        f.lost
                            .push(format!("{label}: approved, but the tool never ran"));
                    } else if done > 1 {
                        f.repeats
                            .push(format!("{label}: ran {done} times with key {effect_key}"));
                    }
                }
            }
        }
        if let (Some(answered), Some(ended)) = (last_answer, root_end(record, thread)) {
            let settle = (ended - answered).to_std().unwrap_or_default();
            if f.slowest_settle.as_ref().is_none_or(|(s, _)| settle > *s) {
                f.slowest_settle = Some((settle, name.clone()));
            }
        }
    }
    for (endpoint, calls) in effects {
        let approved = approved_effects.remove(endpoint).unwrap_or_default();
        for key in calls.keys() {
            if !approved.contains(key) {
                f.doubled.push(format!(
                    "{endpoint:?} ran for key {key}, which no approved request names"
                ));
            }
        }
        let total: u64 = calls.values().sum();
        match endpoint {
            Endpoint::Send => {
                f.approved_sends = approved.len();
                f.send_keys = calls.len();
                f.send_calls = total;
            }
            Endpoint::Job => {
                f.approved_jobs = approved.len();
                f.job_keys = calls.len();
                f.job_calls = total;
            }
        }
    }
    for (endpoint, approved) in approved_effects {
        match endpoint {
            Endpoint::Send => f.approved_sends = approved.len(),
            Endpoint::Job => f.approved_jobs = approved.len(),
        }
    }
    f
}

/// Which counted endpoint a request's call reaches, if any.
fn tool_of(scenario: Scenario, call: &str) -> Option<Endpoint> {
    match scenario {
        Scenario::Questions => None,
        Scenario::Job => Some(Endpoint::Job),
        _ if call.starts_with('d') => None,
        _ => Some(Endpoint::Send),
    }
}

type Required = BTreeMap<Key, Option<DateTime<Utc>>>;

/// The requests of the thread (with their `expiresAt`), their resolutions,
/// and how many times each run ended.
fn read_events(
    record: &RunRecord,
    thread: &ThreadEvents,
) -> (
    Required,
    BTreeMap<Key, Vec<Resolution>>,
    BTreeMap<String, u32>,
) {
    let mut required = Required::new();
    let mut resolved: BTreeMap<Key, Vec<Resolution>> = BTreeMap::new();
    let mut finished: BTreeMap<String, u32> = BTreeMap::new();
    // What the client saw counts too: a request must show in the events.
    for input in &record.seen {
        required.insert(key_of(input), time(&input["expiresAt"]));
    }
    for event in &thread.events {
        let data = &event["data"];
        match event["type"].as_str().unwrap_or_default() {
            "INPUT_REQUIRED" | "ELICITATION" => {
                required.insert(key_of(data), time(&data["expiresAt"]));
            }
            "INPUT_RESOLVED" => resolved.entry(key_of(data)).or_default().push(Resolution {
                status: data["status"].as_str().unwrap_or_default().to_owned(),
                approved: data["approved"].as_bool().unwrap_or(false),
                at: time(&event["createdAt"]),
            }),
            "RUN_COMPLETED" | "RUN_FAILED" | "RUN_CANCELLED" => {
                let run = event["runId"].as_str().unwrap_or_default().to_owned();
                *finished.entry(run).or_default() += 1;
            }
            _ => {}
        }
    }
    (required, resolved, finished)
}

fn key_of(value: &Value) -> Key {
    (
        value["runId"].as_str().unwrap_or_default().to_owned(),
        value["toolCallId"].as_str().unwrap_or_default().to_owned(),
    )
}

fn time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.to_utc())
}

/// When the root run's end was written.
fn root_end(record: &RunRecord, thread: &ThreadEvents) -> Option<DateTime<Utc>> {
    let root = record.run_id.as_deref()?;
    thread
        .events
        .iter()
        .find(|e| e["type"] == "RUN_COMPLETED" && e["runId"] == root)
        .and_then(|e| time(&e["createdAt"]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Attempt, Sent};
    use serde_json::json;

    const RUN: &str = "r1";

    fn record(scenario: Scenario, attempts: Vec<Attempt>) -> RunRecord {
        RunRecord {
            index: 0,
            scenario,
            thread_id: Some("t1".into()),
            run_id: Some(RUN.into()),
            seen: Vec::new(),
            attempts,
            finished: Some("completed".into()),
            error: None,
        }
    }

    fn attempt(sent: Sent, delivered: bool) -> Attempt {
        Attempt {
            run_id: RUN.into(),
            tool_call_id: "c1".into(),
            sent,
            status: Some(200),
            delivered: Some(delivered),
        }
    }

    fn required(expires_at: &str) -> Value {
        json!({ "type": "INPUT_REQUIRED", "runId": RUN, "createdAt": "2026-12-02T10:00:00Z",
                "data": { "runId": RUN, "toolCallId": "c1", "expiresAt": expires_at } })
    }

    fn resolved(status: &str, approved: bool, at: &str) -> Value {
        json!({ "type": "INPUT_RESOLVED", "runId": RUN, "createdAt": at,
                "data": { "runId": RUN, "toolCallId": "c1", "status": status, "approved": approved } })
    }

    fn completed(at: &str) -> Value {
        json!({ "type": "RUN_COMPLETED", "runId": RUN, "createdAt": at, "data": {} })
    }

    /// The thread's events, with the root's end when the list has none.
    fn events(mut list: Vec<Value>) -> BTreeMap<String, ThreadEvents> {
        if !list.iter().any(|e| e["type"] == "RUN_COMPLETED") {
            list.push(completed("2026-12-02T10:00:05Z"));
        }
        bare_events(list)
    }

    fn bare_events(list: Vec<Value>) -> BTreeMap<String, ThreadEvents> {
        BTreeMap::from([("t1".to_owned(), ThreadEvents { events: list })])
    }

    fn sends(keys: &[(&str, u64)]) -> BTreeMap<Endpoint, BTreeMap<String, u64>> {
        BTreeMap::from([(
            Endpoint::Send,
            keys.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        )])
    }

    const LATER: &str = "2026-12-02T11:00:00Z";

    #[test]
    fn an_approval_that_ran_once_is_clean_and_its_settle_time_measured() {
        let records = [record(
            Scenario::Single,
            vec![attempt(Sent::Approve, true), attempt(Sent::Approve, false)],
        )];
        let thread = events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
            completed("2026-12-02T10:00:03Z"),
        ]);
        let f = check(&records, &thread, &sends(&[("r1:c1", 1)]), &[]);
        assert_eq!(f.violations(), 0, "{f:?}");
        assert_eq!((f.delivered, f.too_late, f.approved_sends), (1, 1, 1));
        assert_eq!(f.slowest_settle.unwrap().0, Duration::from_secs(2));
    }

    #[test]
    fn a_repeat_with_the_same_key_is_reported_apart_not_as_a_violation() {
        let records = [record(Scenario::Single, vec![attempt(Sent::Approve, true)])];
        let thread = events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(&records, &thread, &sends(&[("r1:c1", 2)]), &[]);
        assert_eq!(f.violations(), 0);
        assert_eq!(f.repeats.len(), 1);
    }

    #[test]
    fn a_delivered_answer_that_did_not_settle_the_request_is_lost() {
        let records = [record(
            Scenario::Single,
            vec![attempt(Sent::Reject, true), attempt(Sent::Approve, false)],
        )];
        let thread = events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(&records, &thread, &sends(&[("r1:c1", 1)]), &[]);
        assert_eq!(f.lost.len(), 1, "{f:?}");
    }

    #[test]
    fn two_delivered_answers_a_second_resolution_and_an_unapproved_effect_are_doubled() {
        let records = [record(
            Scenario::Single,
            vec![attempt(Sent::Reject, true), attempt(Sent::Reject, true)],
        )];
        let thread = events(vec![
            required(LATER),
            resolved("rejected", false, "2026-12-02T10:00:01Z"),
            resolved("rejected", false, "2026-12-02T10:00:02Z"),
            completed("2026-12-02T10:00:03Z"),
            completed("2026-12-02T10:00:04Z"),
        ]);
        let f = check(&records, &thread, &sends(&[("r1:c1", 1)]), &[]);
        assert_eq!(f.doubled.len(), 4, "{:#?}", f.doubled);
    }

    #[test]
    fn an_approved_call_that_never_ran_is_lost() {
        let records = [record(Scenario::Single, vec![attempt(Sent::Approve, true)])];
        let thread = events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(&records, &thread, &sends(&[]), &[]);
        assert_eq!(f.lost.len(), 1);
    }

    #[test]
    fn an_expiry_before_its_expires_at_is_early_and_after_it_is_timed() {
        let thread = events(vec![
            required("2026-12-02T10:00:02Z"),
            resolved("expired", false, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(
            &[record(Scenario::Expiry, vec![])],
            &thread,
            &sends(&[]),
            &[],
        );
        assert_eq!(f.early.len(), 1);

        let thread = events(vec![
            required("2026-12-02T10:00:02Z"),
            resolved("expired", false, "2026-12-02T10:00:02.500Z"),
        ]);
        let f = check(
            &[record(Scenario::Expiry, vec![])],
            &thread,
            &sends(&[]),
            &[],
        );
        assert_eq!(f.violations(), 0);
        assert_eq!(f.slowest_expiry, Some(Duration::from_millis(500)));
    }

    #[test]
    fn an_answered_request_that_expired_anyway_is_a_violation() {
        let records = [record(
            Scenario::Single,
            vec![attempt(Sent::Approve, false)],
        )];
        let thread = events(vec![
            required(LATER),
            resolved("expired", false, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(&records, &thread, &sends(&[]), &[]);
        assert_eq!(f.early.len(), 1);
    }

    #[test]
    fn a_request_never_resolved_and_a_run_that_never_ended_are_reported() {
        let mut stuck = record(Scenario::Single, vec![]);
        stuck.finished = None;
        let thread = events(vec![required(LATER)]);
        let f = check(&[stuck], &thread, &sends(&[]), &[]);
        assert_eq!(f.stuck.len(), 1);
        // Its request is open because the run is: counted once, as stuck.
        assert!(f.unresolved.is_empty());

        let f = check(
            &[record(Scenario::Single, vec![])],
            &thread,
            &sends(&[]),
            &[],
        );
        assert_eq!(f.unresolved.len(), 1);
    }

    #[test]
    fn a_failed_sub_agent_a_missing_end_event_and_an_unapproved_send_are_caught() {
        let records = [record(
            Scenario::SubAgents,
            vec![attempt(Sent::Approve, true)],
        )];
        let thread = bare_events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
            json!({ "type": "RUN_FAILED", "runId": "child", "createdAt": LATER,
                    "data": { "error": "boom" } }),
        ]);
        let unapproved = ["Send ran for key x:c1 with approval None".to_owned()];
        let f = check(&records, &thread, &sends(&[("r1:c1", 1)]), &unapproved);
        assert_eq!(f.failed.len(), 1, "{:#?}", f.failed);
        assert_eq!(f.lost.len(), 1, "the root's RUN_COMPLETED: {:#?}", f.lost);
        assert_eq!(f.doubled, unapproved);
    }

    #[test]
    fn a_settlement_no_client_sent_is_caught() {
        let records = [record(Scenario::Single, vec![attempt(Sent::Reject, false)])];
        let thread = events(vec![
            required(LATER),
            resolved("executed", true, "2026-12-02T10:00:01Z"),
        ]);
        let f = check(&records, &thread, &sends(&[("r1:c1", 1)]), &[]);
        assert_eq!(f.doubled.len(), 1, "{:#?}", f.doubled);
    }
}
