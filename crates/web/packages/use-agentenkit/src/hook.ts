// useAgentThread: one thread, live, with optimistic answers (SPEC §13).

import { useCallback, useEffect, useMemo, useRef, useState } from "react";

import { asError, inputKey, useOptimisticAnswers } from "./answers";
import { ApiError, type Client } from "./client";
import { coalesced } from "./refresh";
import type { Answers, Delivery, Message, PendingInput, ThreadStatus } from "./types";

/** Which request to answer: its `toolCallId`, or the input itself (or its
 * `{runId, toolCallId}`) when two runs of the tree may use one call id. */
export type InputRef = string | Pick<PendingInput, "runId" | "toolCallId">;

export interface AgentThread {
  status: ThreadStatus | null;
  messages: Message[];
  /** Open requests, without those answered here and not yet settled. */
  pendingInputs: PendingInput[];
  respondToInput(which: InputRef, approved: boolean, payload?: unknown): Promise<void>;
  answer(which: InputRef, answers: Answers): Promise<void>;
  skip(which: InputRef): Promise<void>;
  send(content: string): Promise<void>;
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
  const [messages, setMessages] = useState<Message[]>([]);
  const [serverInputs, setServerInputs] = useState<PendingInput[]>([]);
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
    reset();
    refresh.start(async (isLive) => {
      const [thread, conversation] = await Promise.all([client.getThread(threadId), client.listMessages(threadId)]);
      if (!isLive()) return;
      setStatus(thread.status);
      setMessages(conversation);
      setServerInputs(thread.pendingInputs);
      seen(thread.pendingInputs);
    }, (e) => readFailed(asError(e)));
    const stream = client.subscribe(threadId, () => refresh.read(), {
      onError: (e) => readFailed(asError(e)),
      // A (re)connected stream: read what it missed; the read that succeeds
      // clears the drop's error.
      onOpen: () => refresh.read(),
    });
    return () => {
      stream.close();
      refresh.stop();
    };
  }, [client, threadId, refresh, seen, readFailed, reset]);

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
    (which: InputRef, approved: boolean, payload?: unknown) =>
      answerWith(which, (input) =>
        approved
          ? client.approve(input.runId, input.toolCallId, payload)
          : client.reject(input.runId, input.toolCallId),
      ),
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
    async (content: string) => {
      try {
        await client.sendMessage(threadId, content);
        answerFailed(null);
      } catch (e) {
        answerFailed(asError(e));
        throw e;
      }
      refresh.read();
    },
    [client, threadId, refresh, answerFailed],
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
    tooLate,
    resubscribe,
    error: answers.error,
  };
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
  };
}
