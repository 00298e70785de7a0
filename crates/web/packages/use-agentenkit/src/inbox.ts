// useInbox: every open request of the key's owner, across threads, kept
// current by polling `GET /agent/inbox` (SPEC §13: a new request shows
// within 5 s), answered with the same optimistic drop as useAgentThread.

import { useCallback, useEffect, useMemo, useState } from "react";

import { asError, decide, inputKey, useOptimisticAnswers } from "./answers";
import type { Client } from "./client";
import { coalesced } from "./refresh";
import type { Answers, Decision, PendingInput } from "./types";

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
  const { seen, readFailed, reset, settle } = answers;

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
    tooLate: answers.tooLate,
    error: answers.error,
    refresh: reader.read,
  };
}
