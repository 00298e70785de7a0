// The shapes of the agentenkit HTTP API (SPEC §9), as the server sends them
// (camelCase JSON). `GET /openapi.json` is the full contract.

export type ThreadStatus = "IDLE" | "RUNNING" | "WAITING_FOR_INPUT";
export type RunStatus = "queued" | "running" | "waiting" | "completed" | "failed" | "cancelled";
export type InputKind = "approval" | "park" | "ask";

export interface QuestionOption {
  value: string;
  label: string;
}

export interface Question {
  id: string;
  prompt: string;
  /** A choice question's options; empty for a text or a number. */
  options: QuestionOption[];
  multiple?: boolean;
  defaults?: string[];
  /** What the answer is: a choice when absent. A typed answer is sent as
   * its one string (`["42"]`). */
  kind?: "choice" | "text" | "number" | "integer";
  /** Must be answered, and not with nothing. */
  required?: boolean;
  /** May be left empty: a choice then pre-picks nothing. */
  optional?: boolean;
  /** A text's length in characters, or a number's range. */
  min?: number;
  max?: number;
  /** A page to open before answering (an MCP server's URL-mode request):
   * an http(s) URL, shown whole. */
  link?: string;
}

export interface QuestionSet {
  preamble?: string;
  questions: Question[];
}

/** An open request: an approval, a job's wait, or a question set. */
export interface PendingInput {
  toolCallId: string;
  runId: string;
  threadId: string;
  toolName: string;
  arguments: unknown;
  /** SHA-256 of `arguments` in RFC 8785 canonical form (hex): the hooks
   * send it back with every answer, so a decision binds to the call shown. */
  argumentsHash: string;
  /** For a call several people must approve: how many have so far. */
  approvalsGiven?: number;
  /** For a call several people must approve: how many must. */
  approvalsRequired?: number;
  /** The version of its agent the run is pinned to (absent for an agent
   * built in code): what the run does once answered is what it says. */
  agentVersion?: string;
  kind: InputKind;
  reason: string;
  runName: string;
  depth: number;
  expiresAt: string | null;
  /** When the call was made. */
  createdAt: string;
  request?: QuestionSet;
}

export interface Thread {
  id: string;
  agent: string;
  status: ThreadStatus;
  currentRunId: string | null;
  /** The first 100 open requests, in inbox order. */
  pendingInputs: PendingInput[];
  /** True when there are more than `pendingInputs` holds: page them from
   * `GET /threads/{id}/pending-inputs`. Absent when false. */
  morePendingInputs?: boolean;
  /** The thread's newest event when this view was read (0 before its
   * first): a stream subscribed from it carries on from this view. */
  lastEventId: number;
  /** Messages waiting for the active run to end (`enqueue`), or to join it
   * at its next model call (`steer`), oldest first. Absent when none. */
  queuedMessages?: QueuedMessage[];
  /** What the thread's runs (sub-agents' included) have spent, as the
   * providers reported it (docs/budgets.md). */
  spent: Spending;
}

/** Model and tool calls made, and the tokens the providers reported. */
export interface Spending {
  modelCalls: number;
  toolCalls: number;
  inputTokens: number;
  outputTokens: number;
}

/** What a message sent while a run of the thread is active does with that
 * run (docs/conversations.md): refused (`reject`, 409 `RunActive`), queued
 * behind it, joining it at its next model call, stopping it, or stopping
 * it and leaving it out of the conversation. */
export type OnActive = "reject" | "enqueue" | "steer" | "interrupt" | "rollback";

/** A message waiting on a busy thread. */
export interface QueuedMessage {
  /** The run it starts (for a steering message, the run it starts if the
   * run it steers ends first). */
  runId: string;
  /** The run it joins at its next model call, for a steering message. */
  steers?: string;
  content: string;
  createdAt: string;
}

/** What became of a message: the run that answers it, and whether it
 * waits (`queued`), joined the active run (`steered`, `runId` is that run)
 * or stopped runs (`interrupted`). */
export interface SentMessage {
  runId: string;
  queued?: boolean;
  steered?: boolean;
  interrupted?: string[];
}

export interface CreatedThread {
  id: string;
  agent: string;
  status: ThreadStatus;
}

/** A fork (`forkThread`): the new thread, the thread it came from, and the
 * run that goes on in it (the turn forked in, asking again what was open
 * there, or the turn `content` started), when one does. */
export interface ForkedThread extends CreatedThread {
  forkedFrom: string;
  runId?: string;
}

export interface ToolCallRequest {
  id: string;
  name: string;
  arguments: unknown;
}

/** One entry of a thread's conversation, as `listMessages` returns it:
 * with its `id` (ids grow in commit order, so a reader can ask for those
 * after the last it has). */
export type StoredMessage = Message & { id: number; runId: string; createdAt: string };

/** One entry of a thread's conversation. */
export type Message =
  | { role: "user"; content: string; steered?: boolean }
  | { role: "assistant"; content: string | null; toolCalls?: ToolCallRequest[] }
  | { role: "tool"; toolCallId: string; content: unknown }
  | { role: string; [field: string]: unknown };

export interface ThreadEvent {
  id: number;
  threadId: string;
  runId: string | null;
  type: string;
  data: unknown;
  createdAt: string;
}

export interface Usage {
  modelCall: number;
  inputTokens: number;
  outputTokens: number;
}

export interface Run {
  id: string;
  threadId: string;
  status: RunStatus;
  name: string;
  depth: number;
  parentRunId: string | null;
  parentToolCallId: string | null;
  output: string | null;
  error: string | null;
  usage: Usage[];
  createdAt: string;
  finishedAt: string | null;
}

export interface JournalEntry {
  position: number;
  name: string;
  value: unknown;
}

/** What every answer route returns: `delivered: false` when the request was
 * no longer open (answered elsewhere, expired, stopped). */
export interface Delivery {
  /** For a call several people must approve, when this approval was
   * counted and more are needed. */
  approvals?: { given: number; required: number };
  delivered: boolean;
  error?: string;
}

/** What a person decided beyond yes or no. */
export interface Decision {
  /** Approve: the arguments the call runs with instead of the proposed
   * ones (approvals only; checked against the tool's input schema). */
  arguments?: unknown;
  /** Approve: a note the model reads with the result. */
  message?: string;
  /** Deny: why; the model reads it. */
  reason?: string;
  /** The `argumentsHash` of the request as shown: refused (409
   * `ArgumentsHashMismatch`) when the call's arguments hash otherwise. */
  argumentsHash?: string;
}

/** Question id → the chosen option values. */
export type Answers = Record<string, string[]>;

/** One decision of `decideMany`: the body its single route takes, with
 * the `action` that names the route. */
export type BatchDecision =
  | {
      action: "approve";
      runId: string;
      toolCallId: string;
      payload?: unknown;
      arguments?: unknown;
      message?: string;
      argumentsHash?: string;
    }
  | { action: "deny"; runId: string; toolCallId: string; reason?: string; argumentsHash?: string }
  | { action: "answer"; runId: string; toolCallId: string; answers: Answers }
  | { action: "skip"; runId: string; toolCallId: string };

/** What became of one decision of `decideMany`: the status and body its
 * single route would have answered. */
export interface DecisionResult {
  status: number;
  /** A `Delivery` when `status` is 200; else the error, `{error, message}`. */
  body: Delivery | { error: string; message: string };
}

export interface AgentInfo {
  name: string;
  description?: string;
  ask: boolean;
  subagents: string[];
}
