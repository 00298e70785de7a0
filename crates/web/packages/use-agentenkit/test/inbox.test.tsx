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
});
