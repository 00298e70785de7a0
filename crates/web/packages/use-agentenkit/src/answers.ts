// The optimistic answer both hooks share (SPEC §13): the card drops at once
// and the server confirms; `delivered: false` keeps it gone and names it too
// late; a failure (network, 5xx, refusal) brings it back with the error.

import { useCallback, useRef, useState } from "react";

import { ApiError, type Client } from "./client";
import type { Decision, DecisionResult, Delivery, PendingInput } from "./types";

/** A request is named by its run and call: two runs of a tree (sub-agents)
 * may use one call id. */
export function inputKey(input: Pick<PendingInput, "runId" | "toolCallId">): string {
  return `${input.runId}:${input.toolCallId}`;
}

export interface OptimisticAnswers {
  /** Requests answered here that the server may still list. */
  hidden: ReadonlySet<string>;
  /** Requests answered here that were no longer open, oldest first. */
  tooLate: PendingInput[];
  /** The answer error if the last answer failed, else the read error if
   * the last read failed. */
  error: Error | null;
  /** An answer (or a message) failed, or with null: one went through. */
  answerFailed(error: Error | null): void;
  /** A read of the server's state (or the stream) failed; the next
   * successful read (`seen`) clears it. */
  readFailed(error: Error): void;
  /** Sends `reply` for `input` unless an answer to it is on its way. */
  settle(input: PendingInput, reply: () => Promise<Delivery>): Promise<void>;
  /** Sends one request deciding all of `inputs` (those not being answered
   * already): each drops at once; one whose result is an error comes back
   * with it, one no longer open is too late. */
  settleMany(inputs: readonly PendingInput[], reply: (inputs: PendingInput[]) => Promise<DecisionResult[]>): Promise<void>;
  /** Records a request answered here that the page no longer knew. */
  markTooLate(input: PendingInput): void;
  /** The server's open requests now: what it stopped listing needs no hiding. */
  seen(open: readonly PendingInput[]): void;
  reset(): void;
}

export function useOptimisticAnswers(afterAnswer: () => void): OptimisticAnswers {
  const [hidden, setHidden] = useState<ReadonlySet<string>>(new Set());
  const [tooLate, setTooLate] = useState<PendingInput[]>([]);
  const [answerError, setAnswerError] = useState<Error | null>(null);
  const [readError, setReadError] = useState<Error | null>(null);
  // Answers on their way: a second click is not a second answer (it would
  // come back "too late" against the first).
  const answering = useRef(new Set<string>());

  const markTooLate = useCallback((input: PendingInput) => {
    const key = inputKey(input);
    setTooLate((late) => (late.some((seen) => inputKey(seen) === key) ? late : [...late, input]));
  }, []);

  const settle = useCallback(
    async (input: PendingInput, reply: () => Promise<Delivery>) => {
      const key = inputKey(input);
      if (answering.current.has(key)) return;
      answering.current.add(key);
      setHidden((keys) => new Set(keys).add(key));
      try {
        const delivery = await reply();
        if (!delivery.delivered) markTooLate(input);
        setAnswerError(null);
      } catch (e) {
        setHidden((keys) => {
          const next = new Set(keys);
          next.delete(key);
          return next;
        });
        setAnswerError(asError(e));
      } finally {
        answering.current.delete(key);
      }
      afterAnswer();
    },
    [afterAnswer, markTooLate],
  );

  const settleMany = useCallback(
    async (inputs: readonly PendingInput[], reply: (inputs: PendingInput[]) => Promise<DecisionResult[]>) => {
      const mine = inputs.filter((input) => !answering.current.has(inputKey(input)));
      if (mine.length === 0) return;
      const keys = mine.map(inputKey);
      for (const key of keys) answering.current.add(key);
      setHidden((hiddenKeys) => new Set([...hiddenKeys, ...keys]));
      const bringBack = (back: string[]) =>
        setHidden((hiddenKeys) => {
          const next = new Set(hiddenKeys);
          for (const key of back) next.delete(key);
          return next;
        });
      try {
        const results = await reply(mine);
        let failure: Error | null = null;
        const failed: string[] = [];
        mine.forEach((input, index) => {
          const result = results[index];
          const body = result?.body as Partial<Delivery> & { error?: string; message?: string };
          if (result?.status === 200) {
            if (!body.delivered) markTooLate(input);
          } else {
            failed.push(inputKey(input));
            failure ??= new ApiError(result?.status ?? 0, body?.error ?? "Error", body?.message ?? "no result");
          }
        });
        bringBack(failed);
        setAnswerError(failure);
      } catch (e) {
        bringBack(keys);
        setAnswerError(asError(e));
      } finally {
        for (const key of keys) answering.current.delete(key);
      }
      afterAnswer();
    },
    [afterAnswer, markTooLate],
  );

  const seen = useCallback((open: readonly PendingInput[]) => {
    setReadError(null);
    const listed = new Set(open.map(inputKey));
    setHidden((keys) => {
      // A key being answered stays hidden even if this read predates it.
      const kept = [...keys].filter((key) => listed.has(key) || answering.current.has(key));
      return kept.length === keys.size ? keys : new Set(kept);
    });
  }, []);

  const reset = useCallback(() => {
    setHidden(new Set());
    setTooLate([]);
    setAnswerError(null);
    setReadError(null);
  }, []);
  const readFailed = useCallback((e: Error) => setReadError(e), []);

  return {
    hidden,
    tooLate,
    error: answerError ?? readError,
    answerFailed: setAnswerError,
    readFailed,
    settle,
    settleMany,
    markTooLate,
    seen,
    reset,
  };
}

export function asError(e: unknown): Error {
  if (e instanceof Error) return e;
  return new ApiError(0, "Error", String(e));
}

/** A fresh `Idempotency-Key`: 128 random bits as hex (`getRandomValues`
 * works where `randomUUID` does not: a page served over plain http). */
export function newIdempotencyKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Approves or denies `input`, bound to the arguments it was shown with. */
export function decide(
  client: Client,
  input: PendingInput,
  approved: boolean,
  payload?: unknown,
  decision: Decision = {},
): Promise<Delivery> {
  const shown = { ...decision, argumentsHash: decision.argumentsHash ?? (input.argumentsHash || undefined) };
  return approved
    ? client.approve(input.runId, input.toolCallId, payload, shown)
    : client.reject(input.runId, input.toolCallId, decision.reason, shown);
}
