// A typed client of the agentenkit HTTP API: one method per route of SPEC §9.

import { parseJson, stringifyJson } from "./json";
import { SseParser } from "./sse";
import type {
  AgentInfo,
  Answers,
  BatchDecision,
  CreatedThread,
  DecisionResult,
  Decision,
  Delivery,
  ForkedThread,
  JournalEntry,
  OnActive,
  PendingInput,
  Run,
  SentMessage,
  StoredMessage,
  Thread,
  ThreadEvent,
} from "./types";

export interface ClientOptions {
  /** Where the API is, e.g. `https://agents.example.com` ("" for the page's own origin). */
  baseUrl: string;
  apiKey: string;
  /** The fetch to use (the global one by default). */
  fetch?: typeof fetch;
  /** A request (not a stream) unanswered this long fails with a timeout
   * (default 30 s): a hung request must not stall a poll for ever. */
  timeoutMs?: number;
  /** How many items each page of a list asks for (1 to 1000; default the
   * server's 1000): `listMessages`, `getJournal` and `inbox` follow the
   * pages' `Link` headers to the end either way. */
  pageSize?: number;
}

/** A non-2xx answer: the server's `{error, message}` and the HTTP status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }

  /** A 5xx: the request may be retried. */
  get retryable(): boolean {
    return this.status >= 500;
  }
}

export interface Subscription {
  close(): void;
}

export interface SubscribeOptions {
  /** Resume after this event id (the stream starts from the first otherwise). */
  lastEventId?: number;
  /** First wait before reconnecting; doubles up to 5 s. */
  retryMs?: number;
  onError?: (error: unknown) => void;
  /** The stream is (re)connected: whatever it missed meanwhile is worth a
   * read, and an error from its drop is over. */
  onOpen?: () => void;
}

export interface Client {
  createThread(agent: string, metadata?: Record<string, unknown>): Promise<CreatedThread>;
  getThread(threadId: string): Promise<Thread>;
  /** A turn; while a run is active, `onActive` says what the message does
   * with it (default: the agent's `on_active`, else `reject`). */
  sendMessage(threadId: string, content: string, options?: { onActive?: OnActive }): Promise<SentMessage>;
  /** Cuts the thread back to before user message `messageId` (an active
   * run interrupted first) and starts a turn from `content`. */
  editMessage(threadId: string, messageId: number, content: string): Promise<SentMessage>;
  /** A new thread whose conversation is this one's up to message
   * `atMessageId` (all of it when left out), going on with `content` when
   * given. Open requests are asked again in the fork; the thread forked
   * is left as it was. */
  forkThread(threadId: string, options?: { atMessageId?: number; content?: string }): Promise<ForkedThread>;
  /** The conversation (after message `after`, when given), every page. */
  listMessages(threadId: string, after?: number): Promise<StoredMessage[]>;
  listEvents(threadId: string, after?: number): Promise<ThreadEvent[]>;
  stopThread(threadId: string): Promise<void>;
  getRun(runId: string): Promise<Run>;
  getJournal(runId: string): Promise<JournalEntry[]>;
  /** `decision`: edited `arguments`, a `message`, the `argumentsHash` shown. */
  approve(runId: string, toolCallId: string, payload?: unknown, decision?: Decision): Promise<Delivery>;
  /** `decision.argumentsHash`: the hash shown (`reason` is the argument). */
  reject(runId: string, toolCallId: string, reason?: string, decision?: Decision): Promise<Delivery>;
  answer(runId: string, toolCallId: string, answers: Answers): Promise<Delivery>;
  skip(runId: string, toolCallId: string): Promise<Delivery>;
  respond(
    threadId: string,
    toolCallId: string,
    approved: boolean,
    payload?: unknown,
    argumentsHash?: string,
  ): Promise<Delivery>;
  /** Many decisions in one request, each settled on its own with its own
   * result (in order). With `idempotencyKey` the request is safe to send
   * again: the same key and decisions get the same results. */
  decideMany(decisions: BatchDecision[], options?: { idempotencyKey?: string }): Promise<DecisionResult[]>;
  inbox(): Promise<PendingInput[]>;
  agents(): Promise<AgentInfo[]>;
  /** The thread's events, live, reconnecting with `Last-Event-ID`. */
  subscribe(threadId: string, onEvent: (event: ThreadEvent) => void, options?: SubscribeOptions): Subscription;
}

const MAX_RETRY_MS = 5000;
const DEFAULT_TIMEOUT_MS = 30_000;

export function createClient(options: ClientOptions): Client {
  const base = options.baseUrl.replace(/\/+$/, "");
  const doFetch = options.fetch ?? ((input, init) => fetch(input, init));
  const auth = { Authorization: `Bearer ${options.apiKey}` };
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  async function send(
    method: string,
    path: string,
    body?: unknown,
    extraHeaders: Record<string, string> = {},
  ): Promise<{ json: unknown; response: Response }> {
    const headers: Record<string, string> = { ...auth, ...extraHeaders };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await doFetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : stringifyJson(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    const json: unknown = text ? parseJson(text) : null;
    if (!response.ok) {
      const error = (json ?? {}) as { error?: string; message?: string };
      throw new ApiError(response.status, error.error ?? "Error", error.message ?? response.statusText);
    }
    return { json, response };
  }

  async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await send(method, path, body)).json as T;
  }

  /** Every item of a paged list from `after` on, following the pages'
   * `Link` headers (a cursor seen twice ends it: it would go round). */
  async function all<T>(path: string, after?: string): Promise<T[]> {
    const items: T[] = [];
    const seen = new Set<string>();
    let cursor = after;
    for (;;) {
      const query = new URLSearchParams();
      if (cursor !== undefined) query.set("after", cursor);
      if (options.pageSize !== undefined) query.set("limit", String(options.pageSize));
      const search = query.toString();
      const { json, response } = await send("GET", search ? `${path}?${search}` : path);
      items.push(...(json as T[]));
      const next = nextAfter(response.headers.get("Link"));
      if (next === null || seen.has(next)) return items;
      seen.add(next);
      cursor = next;
    }
  }

  const id = encodeURIComponent;
  return {
    createThread: (agent, metadata) => call("POST", "/threads", metadata ? { agent, metadata } : { agent }),
    getThread: (threadId) => call("GET", `/threads/${id(threadId)}`),
    sendMessage: (threadId, content, options = {}) =>
      call("POST", `/threads/${id(threadId)}/messages`, { content, ...defined({ onActive: options.onActive }) }),
    editMessage: (threadId, messageId, content) =>
      call("POST", `/threads/${id(threadId)}/messages/${messageId}/edit`, { content }),
    forkThread: (threadId, options = {}) =>
      call("POST", `/threads/${id(threadId)}/fork`, defined({ atMessageId: options.atMessageId, content: options.content })),
    listMessages: (threadId, after) =>
      all(`/threads/${id(threadId)}/messages`, after === undefined ? undefined : String(after)),
    listEvents: (threadId, after) =>
      call("GET", `/threads/${id(threadId)}/events${after === undefined ? "" : `?after=${after}`}`),
    stopThread: async (threadId) => {
      await call("POST", `/threads/${id(threadId)}/stop`);
    },
    getRun: (runId) => call("GET", `/runs/${id(runId)}`),
    getJournal: (runId) => all(`/runs/${id(runId)}/journal`),
    approve: (runId, toolCallId, payload, decision = {}) =>
      call("POST", "/agent/tool-call/approve", {
        runId,
        toolCallId,
        ...defined({
          payload,
          arguments: decision.arguments,
          message: decision.message,
          argumentsHash: decision.argumentsHash,
        }),
      }),
    reject: (runId, toolCallId, reason, decision = {}) =>
      call("POST", "/agent/tool-call/reject", {
        runId,
        toolCallId,
        ...defined({ reason: reason ?? decision.reason, argumentsHash: decision.argumentsHash }),
      }),
    answer: (runId, toolCallId, answers) => call("POST", "/agent/tool-call/answer", { runId, toolCallId, answers }),
    skip: (runId, toolCallId) => call("POST", "/agent/tool-call/skip", { runId, toolCallId }),
    respond: (threadId, toolCallId, approved, payload, argumentsHash) =>
      call("POST", "/agent/hitl/respond", {
        threadId,
        toolCallId,
        approved,
        ...defined({ payload, argumentsHash }),
      }),
    decideMany: async (decisions, decideOptions = {}) => {
      const key = decideOptions.idempotencyKey;
      const { json } = await send(
        "POST",
        "/agent/decisions",
        { decisions },
        key === undefined ? {} : { "Idempotency-Key": key },
      );
      return (json as { results: DecisionResult[] }).results;
    },
    inbox: () => all("/agent/inbox"),
    agents: () => call("GET", "/agents"),
    subscribe(threadId, onEvent, subscribeOptions = {}) {
      const controller = new AbortController();
      let lastEventId = subscribeOptions.lastEventId;
      const firstRetry = subscribeOptions.retryMs ?? 500;
      let retry = firstRetry;

      async function readOnce(): Promise<void> {
        const headers: Record<string, string> = { ...auth, Accept: "text/event-stream" };
        if (lastEventId !== undefined) headers["Last-Event-ID"] = String(lastEventId);
        const response = await doFetch(`${base}/threads/${id(threadId)}/stream`, {
          headers,
          signal: controller.signal,
        });
        if (!response.ok || !response.body) {
          const text = await response.text().catch(() => "");
          let message = response.statusText;
          let code = "Error";
          try {
            const json = JSON.parse(text) as { error?: string; message?: string };
            code = json.error ?? code;
            message = json.message ?? message;
          } catch {
            // not JSON: keep the status text
          }
          throw new ApiError(response.status, code, message);
        }
        subscribeOptions.onOpen?.();
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        const parser = new SseParser();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          for (const sse of parser.push(decoder.decode(value, { stream: true }))) {
            const event = parseJson(sse.data);
            const eventId = sse.id === undefined ? NaN : Number(sse.id);
            if (Number.isFinite(eventId)) lastEventId = eventId;
            retry = firstRetry;
            onEvent(toThreadEvent(threadId, sse.event, eventId, event));
          }
        }
      }

      void (async () => {
        while (!controller.signal.aborted) {
          try {
            await readOnce();
          } catch (error) {
            if (controller.signal.aborted) return;
            // A refused key or an unknown thread will not heal by itself.
            if (error instanceof ApiError && error.status >= 400 && error.status < 500 && error.status !== 429) {
              subscribeOptions.onError?.(error);
              return;
            }
            subscribeOptions.onError?.(error);
          }
          if (controller.signal.aborted) return;
          await sleep(retry, controller.signal);
          retry = Math.min(retry * 2, MAX_RETRY_MS);
        }
      })();
      return { close: () => controller.abort() };
    },
  };
}

/** `fields` without those left undefined (the API refuses `null` where a
 * field may only be left out). */
function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}

/** The `after` of the page a `Link` header names as `rel="next"` (RFC
 * 8288), or null. Only its `after` is taken: the page is asked for under
 * this client's own base URL. */
export function nextAfter(link: string | null): string | null {
  if (!link) return null;
  for (const entry of link.split(",")) {
    const match = /^\s*<([^>]*)>(.*)$/.exec(entry);
    if (!match) continue;
    const rels = match[2]!.split(";").map((param) => param.replace(/\s/g, ""));
    if (!rels.includes('rel="next"') && !rels.includes("rel=next")) continue;
    const query = match[1]!.split("?")[1];
    if (query === undefined) continue;
    const after = new URLSearchParams(query).get("after");
    if (after !== null) return after;
  }
  return null;
}

/** The stream's `data` is the event's own `data` or the whole event view;
 * either way the hook gets a `ThreadEvent`. */
function toThreadEvent(threadId: string, type: string, id: number, data: unknown): ThreadEvent {
  const view = data as Partial<ThreadEvent> | null;
  if (view && typeof view === "object" && "type" in view && "data" in view) {
    return view as ThreadEvent;
  }
  const runId =
    data && typeof data === "object" && "runId" in data ? String((data as { runId: unknown }).runId) : null;
  return { id, threadId, runId, type, data, createdAt: new Date().toISOString() };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
