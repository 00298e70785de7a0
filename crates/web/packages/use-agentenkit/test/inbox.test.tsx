// @vitest-environment jsdom
// useInbox against a real `agentenkit dev` (see server.ts): every open
// request of the owner, live by polling, answered optimistically.

import { act, renderHook, waitFor } from "@testing-library/react";
import { describe, expect, inject, it } from "vitest";

import { createClient, inputKey, useInbox, type Client, type PendingInput } from "../src";
import { ALICE, BOB } from "./server";

const baseUrl = inject("baseUrl");
const api = (key = ALICE): Client => createClient({ baseUrl, apiKey: key });

async function parked(client: Client, agent: string): Promise<string> {
  const thread = await client.createThread(agent);
  const { runId } = await client.sendMessage(thread.id, "go");
  return runId;
}

async function waitingForInput(client: Client, runId: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await client.getRun(runId)).status === "waiting") return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`run ${runId} did not park`);
}

function mine(inputs: PendingInput[], runId: string): PendingInput[] {
  return inputs.filter((input) => input.runId === runId);
}

describe("useInbox", () => {
  it("gives up on a hung read after the client's timeout, says so, and clears it when a poll succeeds", async () => {
    let hung = 0;
    // The first inbox read never answers (a fault injected on purpose).
    const hanging: typeof fetch = (input, init) => {
      if (String(input).endsWith("/agent/inbox") && hung++ === 0) {
        return new Promise((_, reject) =>
          init?.signal?.addEventListener("abort", () => reject(init.signal?.reason as Error)),
        );
      }
      return fetch(input, init);
    };
    const slow = createClient({ baseUrl, apiKey: ALICE, fetch: hanging, timeoutMs: 300 });
    const shown: (Error | null)[] = [];
    const inbox = renderHook(() => {
      const state = useInbox(slow, { pollMs: 100 });
      if (shown.at(-1) !== state.error) shown.push(state.error);
      return state;
    });
    await waitFor(() => expect(inbox.result.current.loaded).toBe(true), { timeout: 5000 });
    expect(hung).toBeGreaterThan(1);
    expect(shown.filter((e) => e !== null).map((e) => String(e))).toEqual([expect.stringMatching(/timeout|timed out/i)]);
    expect(inbox.result.current.error).toBeNull();
    inbox.unmount();
  });

  it("shows a new request of the owner by polling, drops it at once on approve, and never shows it to another owner", async () => {
    const alice = api();
    const bob = api(BOB);
    const inbox = renderHook(() => useInbox(alice, { pollMs: 200 }));
    const bobs = renderHook(() => useInbox(bob, { pollMs: 200 }));
    await waitFor(() => expect(inbox.result.current.loaded).toBe(true));
    // Parked after the first read: only a later poll can show it.
    const runId = await parked(alice, "mailer");
    await waitFor(() => expect(mine(inbox.result.current.pendingInputs, runId)).toHaveLength(1));
    const card = mine(inbox.result.current.pendingInputs, runId)[0]!;
    expect(card).toMatchObject({ toolName: "send", kind: "approval", runName: "mailer", depth: 0 });
    // Another owner, polling while the request is open, never sees it.
    await waitFor(() => expect(bobs.result.current.loaded).toBe(true));
    await new Promise((r) => setTimeout(r, 500));
    expect(mine(bobs.result.current.pendingInputs, runId)).toEqual([]);

    let answered!: Promise<void>;
    act(() => {
      answered = inbox.result.current.respondToInput(card, true);
    });
    expect(mine(inbox.result.current.pendingInputs, runId)).toEqual([]);
    await act(() => answered);
    expect(inbox.result.current.tooLate).toEqual([]);
    expect(inbox.result.current.error).toBeNull();
    // Polls after the answer do not bring it back.
    await new Promise((r) => setTimeout(r, 500));
    expect(mine(inbox.result.current.pendingInputs, runId)).toEqual([]);

    inbox.unmount();
    bobs.unmount();
  });

  it("follows the inbox's pages to the end", async () => {
    const urls: string[] = [];
    const recording: typeof fetch = (input, init) => {
      urls.push(String(input));
      return fetch(input, init);
    };
    const alice = api();
    const runs = [await parked(alice, "mailer"), await parked(alice, "mailer"), await parked(alice, "mailer")];
    for (const runId of runs) await waitingForInput(alice, runId);
    const paging = createClient({ baseUrl, apiKey: ALICE, fetch: recording, pageSize: 1 });
    const inbox = renderHook(() => useInbox(paging, { pollMs: 60_000 }));
    await waitFor(() => expect(inbox.result.current.loaded).toBe(true));
    for (const runId of runs) expect(mine(inbox.result.current.pendingInputs, runId)).toHaveLength(1);
    // One request a page: the first, then one after each cursor.
    const reads = urls.filter((url) => url.includes("/agent/inbox"));
    expect(reads[0]).toMatch(/\/agent\/inbox\?limit=1$/);
    expect(reads.length).toBeGreaterThan(runs.length);
    expect(reads.slice(1).every((url) => /\?after=[-0-9a-f.]+&limit=1$/.test(url))).toBe(true);
    expect(new Set(reads).size).toBe(reads.length);
    inbox.unmount();
  });

  it("names a request answered elsewhere too late and keeps its card gone", async () => {
    const alice = api();
    const runId = await parked(alice, "mailer");
    await waitingForInput(alice, runId);
    // A slow poll, so the stale card is still shown when it is clicked.
    const inbox = renderHook(() => useInbox(alice, { pollMs: 60_000 }));
    await waitFor(() => expect(mine(inbox.result.current.pendingInputs, runId)).toHaveLength(1));
    const card = mine(inbox.result.current.pendingInputs, runId)[0]!;
    expect(await alice.reject(runId, card.toolCallId)).toEqual({ delivered: true });
    await act(() => inbox.result.current.respondToInput(card, true));
    expect(inbox.result.current.tooLate.map(inputKey)).toEqual([inputKey(card)]);
    expect(mine(inbox.result.current.pendingInputs, runId)).toEqual([]);
    expect(inbox.result.current.error).toBeNull();
    inbox.unmount();
  });

  it("approves many in one request and sends it once more with the same key when the answer is lost", async () => {
    const alice = api();
    const runs = [await parked(alice, "mailer"), await parked(alice, "mailer")];
    for (const runId of runs) await waitingForInput(alice, runId);
    const keys: string[] = [];
    const bodies: unknown[] = [];
    let lost = 0;
    // The first batch reaches the server, but its answer is lost on the way.
    const losing: typeof fetch = async (input, init) => {
      if (String(input).endsWith("/agent/decisions")) {
        keys.push(new Headers(init?.headers).get("Idempotency-Key") ?? "");
        bodies.push(JSON.parse(String(init?.body)));
        const response = await fetch(input, init);
        if (lost++ === 0) throw new TypeError("network connection lost");
        return response;
      }
      return fetch(input, init);
    };
    const client = createClient({ baseUrl, apiKey: ALICE, fetch: losing });
    const inbox = renderHook(() => useInbox(client, { pollMs: 60_000 }));
    await waitFor(() => expect(runs.flatMap((r) => mine(inbox.result.current.pendingInputs, r))).toHaveLength(2));
    const cards = runs.flatMap((r) => mine(inbox.result.current.pendingInputs, r));
    let answered!: Promise<void>;
    act(() => {
      answered = inbox.result.current.respondToMany(cards, true, { message: "both fine" });
    });
    expect(runs.flatMap((r) => mine(inbox.result.current.pendingInputs, r))).toEqual([]);
    await act(() => answered);
    // Sent twice with one key: the second got the first's results, so
    // neither is "too late" and nothing failed.
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(bodies[0]).toEqual({
      decisions: cards.map((card) => ({
        action: "approve",
        runId: card.runId,
        toolCallId: card.toolCallId,
        argumentsHash: card.argumentsHash,
        message: "both fine",
      })),
    });
    expect(inbox.result.current.tooLate).toEqual([]);
    expect(inbox.result.current.error).toBeNull();
    for (const runId of runs) {
      await waitFor(async () => expect((await alice.getRun(runId)).status).toBe("completed"), { timeout: 10_000 });
    }
    inbox.unmount();
  });

  it("brings back the one request of a batch the server refused, with its error", async () => {
    const alice = api();
    const runs = [await parked(alice, "mailer"), await parked(alice, "mailer")];
    for (const runId of runs) await waitingForInput(alice, runId);
    const inbox = renderHook(() => useInbox(alice, { pollMs: 60_000 }));
    await waitFor(() => expect(runs.flatMap((r) => mine(inbox.result.current.pendingInputs, r))).toHaveLength(2));
    const [good, stale] = runs.flatMap((r) => mine(inbox.result.current.pendingInputs, r));
    // As if the card showed other arguments than the call has now.
    const shownOtherwise = { ...stale!, argumentsHash: "0".repeat(64) };
    await act(() => inbox.result.current.respondToMany([good!, shownOtherwise], false, { reason: "not today" }));
    expect(inbox.result.current.error).toMatchObject({ status: 409, code: "ArgumentsHashMismatch" });
    expect(mine(inbox.result.current.pendingInputs, good!.runId)).toEqual([]);
    expect(mine(inbox.result.current.pendingInputs, stale!.runId)).toHaveLength(1);
    await waitFor(async () => expect((await alice.getRun(good!.runId)).status).toBe("completed"));
    expect((await alice.getRun(stale!.runId)).status).toBe("waiting");
    await act(() => inbox.result.current.respondToInput(stale!, false));
    inbox.unmount();
  });
});
