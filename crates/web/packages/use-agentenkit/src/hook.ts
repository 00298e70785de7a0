// useAgentThread: one thread, live, with optimistic answers (SPEC §13).

import { useCallback, useEffect, useMemo, useRef, useState } from "react";

import { ApiError, type Client } from "./client";
import type { Answers, Delivery, Message, PendingInput, ThreadStatus } from "./types";

export interface AgentThread {
  status: ThreadStatus | null;
  messages: Message[];
  /** Open requests, without those answered here and not yet settled. */
  pendingInputs: PendingInput[];
  respondToInput(toolCallId: string, approved: boolean, payload?: unknown): Promise<void>;
  answer(toolCallId: string, answers: Answers): Promise<void>;
  skip(toolCallId: string): Promise<void>;
  send(content: string): Promise<void>;
  /** Requests answered here that were no longer open (answered elsewhere,
   * expired or stopped): their cards stay gone. */
  tooLate: string[];
  /** The last failure: a card whose answer failed (network, 5xx, refused)
   * comes back with it. */
  error: Error | null;
}

export function useAgentThread(client: Client, threadId: string): AgentThread {
  const [status, setStatus] = useState<ThreadStatus | null>(null);
  const [messages, setMessages] = useState<Message[]>([]);
  const [serverInputs, setServerInputs] = useState<PendingInput[]>([]);
  const [dropped, setDropped] = useState<ReadonlySet<string>>(new Set());
  const [tooLate, setTooLate] = useState<string[]>([]);
  const [error, setError] = useState<Error | null>(null);
  // The inputs as last seen, for the answer callbacks (which need a runId).
  const inputsRef = useRef<PendingInput[]>([]);
  inputsRef.current = serverInputs;
  // Answers on their way (by run and call): a second click is not a second
  // answer (it would come back "too late" against the first).
  const answering = useRef(new Set<string>());

  // Reads the thread; coalesces the refreshes events ask for while one runs.
  const refresh = useMemo(() => {
    let running = false;
    let again = false;
    let live = true;
    const read = async () => {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        do {
          again = false;
          const [thread, conversation] = await Promise.all([
            client.getThread(threadId),
            client.listMessages(threadId),
          ]);
          if (!live) return;
          setStatus(thread.status);
          setMessages(conversation);
          setServerInputs(thread.pendingInputs);
          // A card answered here stays hidden until the server stops
          // listing it; then it needs no hiding.
          const open = new Set(thread.pendingInputs.map(keyOf));
          setDropped((hidden) => {
            const kept = [...hidden].filter((callId) => open.has(callId));
            return kept.length === hidden.size ? hidden : new Set(kept);
          });
        } while (again && live);
      } catch (e) {
        if (live) setError(asError(e));
      } finally {
        running = false;
      }
    };
    return { read, stop: () => (live = false) };
  }, [client, threadId]);

  useEffect(() => {
    setStatus(null);
    setMessages([]);
    setServerInputs([]);
    setDropped(new Set());
    setTooLate([]);
    setError(null);
    void refresh.read();
    const subscription = client.subscribe(threadId, () => void refresh.read(), {
      onError: (e) => setError(asError(e)),
    });
    return () => {
      subscription.close();
      refresh.stop();
    };
  }, [client, threadId, refresh]);

  const settle = useCallback(
    async (toolCallId: string, reply: (input: PendingInput) => Promise<Delivery>) => {
      const matching = inputsRef.current.filter((candidate) => candidate.toolCallId === toolCallId);
      if (matching.length > 1) {
        // Two runs of the tree (sub-agents) may use one call id.
        setError(new ApiError(409, "AmbiguousToolCallId", `${toolCallId} names ${matching.length} open requests`));
        return;
      }
      const input = matching[0];
      if (!input) {
        setTooLate((names) => (names.includes(toolCallId) ? names : [...names, toolCallId]));
        return;
      }
      const key = keyOf(input);
      if (answering.current.has(key)) return;
      answering.current.add(key);
      // Gone at once; the server confirms.
      setDropped((hidden) => new Set(hidden).add(key));
      try {
        const delivery = await reply(input);
        if (!delivery.delivered) {
          setTooLate((names) => (names.includes(toolCallId) ? names : [...names, toolCallId]));
        }
        setError(null);
      } catch (e) {
        // Not answered: the card comes back with the reason.
        setDropped((hidden) => {
          const next = new Set(hidden);
          next.delete(key);
          return next;
        });
        setError(asError(e));
      } finally {
        answering.current.delete(key);
      }
      void refresh.read();
    },
    [refresh],
  );

  const respondToInput = useCallback(
    (toolCallId: string, approved: boolean, payload?: unknown) =>
      settle(toolCallId, (input) =>
        approved ? client.approve(input.runId, toolCallId, payload) : client.reject(input.runId, toolCallId),
      ),
    [client, settle],
  );
  const answer = useCallback(
    (toolCallId: string, answers: Answers) =>
      settle(toolCallId, (input) => client.answer(input.runId, toolCallId, answers)),
    [client, settle],
  );
  const skip = useCallback(
    (toolCallId: string) => settle(toolCallId, (input) => client.skip(input.runId, toolCallId)),
    [client, settle],
  );
  const send = useCallback(
    async (content: string) => {
      try {
        await client.sendMessage(threadId, content);
        setError(null);
      } catch (e) {
        setError(asError(e));
        throw e;
      }
      void refresh.read();
    },
    [client, threadId, refresh],
  );

  const pendingInputs = useMemo(
    () => serverInputs.filter((input) => !dropped.has(keyOf(input))),
    [serverInputs, dropped],
  );
  return { status, messages, pendingInputs, respondToInput, answer, skip, send, tooLate, error };
}

function keyOf(input: PendingInput): string {
  return `${input.runId}:${input.toolCallId}`;
}

function asError(e: unknown): Error {
  if (e instanceof Error) return e;
  return new ApiError(0, "Error", String(e));
}
