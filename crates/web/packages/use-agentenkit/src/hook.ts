// useAgentThread: one thread, live, with optimistic answers (SPEC §13).

import { useCallback, useEffect, useMemo, useRef, useState } from "react";

import { asError, decide, inputKey, useOptimisticAnswers } from "./answers";
import { ApiError, type Client, type Subscription } from "./client";
import { coalesced } from "./refresh";
import type {
  Answers,
  Decision,
  Delivery,
  OnActive,
  PendingInput,
  QueuedMessage,
  SentMessage,
  StoredMessage,
  ThreadEvent,
  ThreadStatus,
} from "./types";

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 5000;

/** Which request to answer: its `toolCallId`, or the input itself (or its
 * `{runId, toolCallId}`) when two runs of the tree may use one call id. */
export type InputRef = string | Pick<PendingInput, "runId" | "toolCallId">;

export interface AgentThread {
  status: ThreadStatus | null;
  messages: StoredMessage[];
  /** Open requests, without those answered here and not yet settled. */
  pendingInputs: PendingInput[];
  /** `decision`: edited `arguments` and a `message` (approve), a `reason`
   * (deny). The input's `argumentsHash` goes with it: an answer to a call
   * whose arguments are not those shown is refused, and `error` says so. */
  respondToInput(which: InputRef, approved: boolean, payload?: unknown, decision?: Decision): Promise<void>;
  answer(which: InputRef, answers: Answers): Promise<void>;
  skip(which: InputRef): Promise<void>;
  /** A message; while a run is active, `onActive` says what it does with
   * it (default: the agent's `on_active`, else `reject`, a 409). */
  send(content: string, onActive?: OnActive): Promise<SentMessage>;
  /** Cuts the conversation back to before user message `messageId` and
   * goes on from `content`; the conversation is read again whole. */
  edit(messageId: number, content: string): Promise<SentMessage>;
  /** Messages waiting for the active run (`enqueue`), or to join it at its
   * next model call (`steer`), oldest first. */
  queuedMessages: QueuedMessage[];
  /** Requests answered here that were no longer open (answered elsewhere,
   * expired or stopped): their cards stay gone. */
  tooLate: string[];
  /** Subscribes to the thread again: after a permanent refusal (a 4xx such
   * as a revoked key, which the stream does not retry) has been fixed. */
  resubscribe(): void;
  /** The last failure: a card whose answer failed (network, 5xx, refused)
   * comes back with it. */
  error: Error | null;
}

/** `client` must be the same object from render to render (create it once,
 * or with `useMemo`): a new client is a new subscription. */
export function useAgentThread(client: Client, threadId: string): AgentThread {
  const [status, setStatus] = useState<ThreadStatus | null>(null);
  const [messages, setMessages] = useState<StoredMessage[]>([]);
  const [serverInputs, setServerInputs] = useState<PendingInput[]>([]);
  const [queuedMessages, setQueuedMessages] = useState<QueuedMessage[]>([]);
  // The inputs as last seen, for the answer callbacks (which need a runId).
  const inputsRef = useRef<PendingInput[]>([]);
  inputsRef.current = serverInputs;
  // Bumped by `resubscribe`: a new subscription (and a fresh read).
  const [subscription, setSubscription] = useState(0);
  const resubscribe = useCallback(() => setSubscription((n) => n + 1), []);
  const refresh = useMemo(() => coalesced(), [client, threadId, subscription]);
  const answers = useOptimisticAnswers(refresh.read);
  const { seen, readFailed, answerFailed, reset } = answers;

  useEffect(() => {
    setStatus(null);
    setMessages([]);
    setServerInputs([]);
    setQueuedMessages([]);
    reset();
    // What this subscription has: messages up to `lastMessageId` (ids grow
    // in commit order, so the next read asks only for those after it).
    let lastMessageId = 0;
    let stream: Subscription | null = null;
    let closed = false;
    // Until the stream is there to ask for reads, a failed first read is
    // tried again (backing off to 5 s); a 4xx waits for `resubscribe`.
    let retryMs = FIRST_RETRY_MS;
    let retry: ReturnType<typeof setTimeout> | undefined;
    // A stream that connected before, or failed to: its next connect may
    // have missed events.
    let opened = false;
    let dropped = false;
    refresh.start(async (isLive) => {
      // The thread first: its `lastEventId` is an event every message read
      // after it includes, so the stream can start there.
      const thread = await client.getThread(threadId);
      const fresh = await client.listMessages(threadId, lastMessageId);
      if (!isLive()) return;
      setStatus(thread.status);
      const newest = fresh[fresh.length - 1];
      if (newest) {
        lastMessageId = newest.id;
        setMessages((known) => [...known, ...fresh]);
      }
      setServerInputs(thread.pendingInputs);
      setQueuedMessages(thread.queuedMessages ?? []);
      seen(thread.pendingInputs);
      if (!stream && !closed) {
        // Only what comes after this read: nothing replayed from event 0.
        // A turn cut out of the conversation (an edit or a rollback, here
        // or elsewhere): the messages known here are no longer it.
        const onEvent = (event: ThreadEvent) => (cutAway(event) ? resubscribe() : refresh.read());
        stream = client.subscribe(threadId, onEvent, {
          lastEventId: thread.lastEventId,
          onError: (e) => {
            dropped = true;
            readFailed(asError(e));
          },
          // A reconnected stream: read what it missed; the read that
          // succeeds clears the drop's error. (A first connect that did
          // not fail follows the read that started it: nothing to read.)
          onOpen: () => {
            if (opened || dropped) refresh.read();
            opened = true;
          },
        });
      }
    }, (e) => {
      readFailed(asError(e));
      const permanent = e instanceof ApiError && !e.retryable && e.status !== 429;
      if (stream || closed || permanent) return;
      retry = setTimeout(() => refresh.read(), retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    });
    return () => {
      closed = true;
      clearTimeout(retry);
      stream?.close();
      refresh.stop();
    };
  }, [client, threadId, refresh, seen, readFailed, reset, resubscribe]);

  const { settle, markTooLate } = answers;
  const answerWith = useCallback(
    async (which: InputRef, reply: (input: PendingInput) => Promise<Delivery>) => {
      const toolCallId = typeof which === "string" ? which : which.toolCallId;
      const matches = (candidate: PendingInput) =>
        candidate.toolCallId === toolCallId && (typeof which === "string" || candidate.runId === which.runId);
      let matching = inputsRef.current.filter(matches);
      if (matching.length === 0) {
        // Not listed here yet (before the first read, or an id from a
        // notification): the server decides, never this page's list.
        try {
          matching = (await client.getThread(threadId)).pendingInputs.filter(matches);
        } catch (e) {
          answerFailed(asError(e));
          return;
        }
        if (matching.length === 0 && typeof which !== "string") {
          // The caller named the run: send it, and the answer says.
          const named = unknownInput(threadId, toolCallId, which.runId);
          await settle(named, () => reply(named));
          return;
        }
      }
      if (matching.length > 1) {
        // Two runs of the tree (sub-agents) may use one call id: name the run.
        answerFailed(
          new ApiError(409, "AmbiguousToolCallId", `${toolCallId} names ${matching.length} open requests; pass the input`),
        );
        return;
      }
      const input = matching[0];
      if (!input) {
        // The server lists no such open request: it was answered elsewhere.
        markTooLate(unknownInput(threadId, toolCallId, ""));
        return;
      }
      await settle(input, () => reply(input));
    },
    [client, settle, markTooLate, answerFailed, threadId],
  );

  const respondToInput = useCallback(
    (which: InputRef, approved: boolean, payload?: unknown, decision?: Decision) =>
      answerWith(which, (input) => decide(client, input, approved, payload, decision)),
    [client, answerWith],
  );
  const answer = useCallback(
    (which: InputRef, given: Answers) =>
      answerWith(which, (input) => client.answer(input.runId, input.toolCallId, given)),
    [client, answerWith],
  );
  const skip = useCallback(
    (which: InputRef) => answerWith(which, (input) => client.skip(input.runId, input.toolCallId)),
    [client, answerWith],
  );
  const send = useCallback(
    async (content: string, onActive?: OnActive) => {
      let sent: SentMessage;
      try {
        sent = await client.sendMessage(threadId, content, onActive === undefined ? {} : { onActive });
        answerFailed(null);
      } catch (e) {
        answerFailed(asError(e));
        throw e;
      }
      refresh.read();
      return sent;
    },
    [client, threadId, refresh, answerFailed],
  );
  const edit = useCallback(
    async (messageId: number, content: string) => {
      let sent: SentMessage;
      try {
        sent = await client.editMessage(threadId, messageId, content);
        answerFailed(null);
      } catch (e) {
        answerFailed(asError(e));
        throw e;
      }
      resubscribe();
      return sent;
    },
    [client, threadId, resubscribe, answerFailed],
  );

  const pendingInputs = useMemo(
    () => serverInputs.filter((input) => !answers.hidden.has(inputKey(input))),
    [serverInputs, answers.hidden],
  );
  const tooLate = useMemo(() => answers.tooLate.map((input) => input.toolCallId), [answers.tooLate]);
  return {
    status,
    messages,
    pendingInputs,
    respondToInput,
    answer,
    skip,
    send,
    edit,
    queuedMessages,
    tooLate,
    resubscribe,
    error: answers.error,
  };
}

/** An event saying turns left the conversation (an edit or a rollback). */
function cutAway(event: ThreadEvent): boolean {
  return event.type === "CONVERSATION_CUT";
}

/** A request the page no longer listed when it was answered. */
function unknownInput(threadId: string, toolCallId: string, runId: string): PendingInput {
  return {
    toolCallId,
    runId,
    threadId,
    toolName: "",
    arguments: null,
    kind: "approval",
    reason: "",
    runName: "",
    depth: 0,
    expiresAt: null,
    createdAt: "",
    argumentsHash: "",
  };
}
