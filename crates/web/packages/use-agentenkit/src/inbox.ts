// useInbox: every open request of the key's owner, across threads, kept
// current by polling `GET /agent/inbox` (SPEC §13: a new request shows
// within 5 s), answered with the same optimistic drop as useAgentThread.

import { useCallback, useEffect, useMemo, useState } from "react";

import { asError, decide, inputKey, newIdempotencyKey, useOptimisticAnswers } from "./answers";
import { ApiError, type Client } from "./client";
import { coalesced } from "./refresh";
import type { Answers, BatchDecision, Decision, DecisionResult, PendingInput } from "./types";

export interface InboxOptions {
  /** How often to ask the server (default 2 s). */
  pollMs?: number;
}

export interface Inbox {
  /** Open requests, without those answered here and not yet settled. */
  pendingInputs: PendingInput[];
  /** The first read has returned. */
  loaded: boolean;
  /** As `useAgentThread`'s: edits and a note, or a reason, bound to the
   * input's `argumentsHash`. */
  respondToInput(input: PendingInput, approved: boolean, payload?: unknown, decision?: Decision): Promise<void>;
  answer(input: PendingInput, answers: Answers): Promise<void>;
  skip(input: PendingInput): Promise<void>;
  /** Approves (or denies) every one of `inputs` in one request, each bound
   * to its `argumentsHash`, with `decision`'s note (or reason) for all.
   * Each drops at once; one the server refuses comes back with the error.
   * A request that fails on the way is sent once more with the same
   * `Idempotency-Key`, which makes the retry safe. */
  respondToMany(inputs: readonly PendingInput[], approved: boolean, decision?: Decision): Promise<void>;
  /** Requests answered here that were no longer open (answered elsewhere,
   * expired or stopped), oldest first. */
  tooLate: PendingInput[];
  /** The last failure: a card whose answer failed comes back with it. */
  error: Error | null;
  /** Ask the server now. */
  refresh(): void;
}

export const DEFAULT_INBOX_POLL_MS = 2000;

/** `client` must be the same object from render to render (create it once,
 * or with `useMemo`): a new client starts the inbox over. */
export function useInbox(client: Client, options: InboxOptions = {}): Inbox {
  const pollMs = options.pollMs ?? DEFAULT_INBOX_POLL_MS;
  const [serverInputs, setServerInputs] = useState<PendingInput[]>([]);
  const [loaded, setLoaded] = useState(false);
  const reader = useMemo(() => coalesced(), [client]);
  const answers = useOptimisticAnswers(reader.read);
  const { seen, readFailed, reset, settle, settleMany } = answers;

  useEffect(() => {
    setServerInputs([]);
    setLoaded(false);
    reset();
    reader.start(
      async (isLive) => {
        const open = await client.inbox();
        if (!isLive()) return;
        setServerInputs(open);
        setLoaded(true);
        seen(open);
      },
      (e) => readFailed(asError(e)),
    );
    const timer = setInterval(() => reader.read(), pollMs);
    return () => {
      clearInterval(timer);
      reader.stop();
    };
  }, [client, reader, pollMs, seen, readFailed, reset]);

  const respondToInput = useCallback(
    (input: PendingInput, approved: boolean, payload?: unknown, decision?: Decision) =>
      settle(input, () => decide(client, input, approved, payload, decision)),
    [client, settle],
  );
  const answer = useCallback(
    (input: PendingInput, given: Answers) => settle(input, () => client.answer(input.runId, input.toolCallId, given)),
    [client, settle],
  );
  const skip = useCallback(
    (input: PendingInput) => settle(input, () => client.skip(input.runId, input.toolCallId)),
    [client, settle],
  );

  const respondToMany = useCallback(
    (inputs: readonly PendingInput[], approved: boolean, decision: Decision = {}) =>
      settleMany(inputs, (mine) => {
        const decisions: BatchDecision[] = mine.map((input) => {
          const call = { runId: input.runId, toolCallId: input.toolCallId, argumentsHash: input.argumentsHash || undefined };
          return approved
            ? { action: "approve", ...call, message: decision.message }
            : { action: "deny", ...call, reason: decision.reason };
        });
        return decideOnceMore(client, decisions, newIdempotencyKey());
      }),
    [client, settleMany],
  );

  const pendingInputs = useMemo(
    () => serverInputs.filter((input) => !answers.hidden.has(inputKey(input))),
    [serverInputs, answers.hidden],
  );
  return {
    pendingInputs,
    loaded,
    respondToInput,
    answer,
    skip,
    respondToMany,
    tooLate: answers.tooLate,
    error: answers.error,
    refresh: reader.read,
  };
}

/** `decideMany`, sent once more after a second when the first attempt
 * failed on the way (no answer, a 5xx, or the key still held by it): the
 * same key makes the second attempt settle only what the first did not. */
async function decideOnceMore(client: Client, decisions: BatchDecision[], idempotencyKey: string): Promise<DecisionResult[]> {
  try {
    return await client.decideMany(decisions, { idempotencyKey });
  } catch (e) {
    const worthAgain =
      !(e instanceof ApiError) || e.retryable || (e.status === 409 && e.code === "IdempotencyKeyInUse");
    if (!worthAgain) throw e;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return client.decideMany(decisions, { idempotencyKey });
  }
}
