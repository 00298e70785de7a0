//! Metric names, defined once. The binaries install the exporter.

pub const SEGMENTS: &str = "agentenkit_segments_total";
pub const SEGMENT_SECONDS: &str = "agentenkit_segment_duration_seconds";
pub const MODEL_CALLS: &str = "agentenkit_model_calls_total";
pub const TOOL_EXECUTIONS: &str = "agentenkit_tool_executions_total";
pub const RUNS_FINISHED: &str = "agentenkit_runs_finished_total";
pub const RECLAIMS: &str = "agentenkit_reclaims_total";
/// Steps that waited for a model provider in a delayed message, holding
/// no worker (`provider`, `cause`: `retry_after`, a 429's, or
/// `fleet_limit`, the model's `requests_per_minute`/`tokens_per_minute`).
pub const PROVIDER_WAITS: &str = "agentenkit_provider_waits_total";
pub const OUTBOX_PUBLISHED: &str = "agentenkit_outbox_published_total";
pub const OUTBOX_PUBLISH_FAILURES: &str = "agentenkit_outbox_publish_failures_total";
pub const PARKS: &str = "agentenkit_parks_total";
/// Rounds of questions a running tool asked (an MCP server's
/// `input_required`), each parked as a question set.
pub const TOOL_QUESTIONS: &str = "agentenkit_tool_question_rounds_total";
/// Waits a running tool parked for work elsewhere (an MCP server's task).
pub const TOOL_WAITS: &str = "agentenkit_tool_wait_rounds_total";
/// Checks on work a call waits for (`outcome`: `pending`, `ready`,
/// `abandoned` when its wait ended otherwise, `dropped` for a duplicate).
pub const TOOL_POLLS: &str = "agentenkit_tool_polls_total";
pub const ANSWERS: &str = "agentenkit_answers_total";
/// Calls refused without asking: a person denied the same call (same
/// tool, same arguments) earlier in the run.
pub const REPEATED_DENIALS: &str = "agentenkit_repeated_denials_total";
/// Segments a worker handed back because it cannot serve the version of
/// the agent their run is pinned to.
pub const UNSERVED_VERSIONS: &str = "agentenkit_unserved_versions_total";
pub const EXPIRIES: &str = "agentenkit_expiries_total";
pub const EXPIRIES_RESCHEDULED: &str = "agentenkit_expiries_rescheduled_total";
/// Messages moved to the dead-letter queue (unreadable, or still failing
/// after `max_deliveries`).
pub const DEAD_LETTERS: &str = "agentenkit_dead_letters_total";
/// Deliveries a worker gave up settling within its `settle_timeout`
/// (`what`: `ack`, `hand-back`, `dead letter`): the broker was blocking
/// publishers or unreachable; the message goes back to the broker.
pub const SETTLE_TIMEOUTS: &str = "agentenkit_settle_timeouts_total";
/// From a request's parking to the reply that settled it (delivered
/// replies only), seconds.
pub const ANSWER_WAIT_SECONDS: &str = "agentenkit_answer_wait_seconds";
/// How long after its `expires_at` a request expired, seconds; `by` is
/// `worker` (the delayed message) or `reaper` (an overdue request).
pub const EXPIRY_LATENESS_SECONDS: &str = "agentenkit_expiry_lateness_seconds";
/// 1 while this process reaches the broker, 0 while it is away (set by
/// every readiness check of the API).
pub const BROKER_UP: &str = "agentenkit_broker_up";
/// Attempts to send a notification to a target (`outcome`: `delivered`,
/// `failed`, `dead`: failed on its last attempt).
pub const NOTIFICATIONS: &str = "agentenkit_notifications_total";
/// Runs moved to a newer version of their agent at a segment's start
/// (`on_deploy = "upgrade"`).
pub const VERSION_SWITCHES: &str = "agentenkit_version_switches_total";
/// Events claimed to be sent by the process that committed them that it
/// was too busy to send: published for a worker instead.
pub const NOTIFICATIONS_GIVEN_BACK: &str = "agentenkit_notifications_given_back_total";
/// Reminders of requests still open (`outcome`: `sent`, or `dropped` when
/// the request was answered first).
pub const REMINDERS: &str = "agentenkit_reminders_total";
/// Calls of MCP servers' tools, one per attempt (`server`; `outcome`: `ok`,
/// `tool_error` (the tool said `isError`), `refused` (a JSON-RPC error or
/// an answer that is none), `unreachable` (no session, no answer in time,
/// a hang-up)).
pub const MCP_CALLS: &str = "agentenkit_mcp_calls_total";
/// Rounds of questions an MCP server asked (`input_required`), by server.
pub const MCP_QUESTIONS: &str = "agentenkit_mcp_questions_total";
/// Agents whose new turns moved to another version because their MCP
/// servers list other tools now (or could be listed at last).
pub const RELISTED_VERSIONS: &str = "agentenkit_relisted_versions_total";
/// Tasks an MCP server started for a call (`server`).
pub const MCP_TASKS: &str = "agentenkit_mcp_tasks_total";
/// Messages sent to a thread, by what they did (`outcome`: `started`,
/// `queued`, `steered`, `interrupted`, `rolled_back`, `edited`).
pub const TURN_MESSAGES: &str = "agentenkit_turn_messages_total";
/// One attempt of a call of an MCP server's tool, seconds (`server`).
pub const MCP_CALL_SECONDS: &str = "agentenkit_mcp_call_duration_seconds";
