// @vitest-environment jsdom
// The hook against a real `agentenkit dev` (see server.ts): optimistic
// drop, too late, error restore, answers and skip.

import { act, renderHook, waitFor } from "@testing-library/react";
import { describe, expect, inject, it } from "vitest";

import { createClient, useAgentThread, type Client, type Thread } from "../src";
import { ALICE } from "./server";

const baseUrl = inject("baseUrl");

function client(fetchImpl?: typeof fetch): Client {
  return createClient({ baseUrl, apiKey: ALICE, fetch: fetchImpl });
}

async function parkedThread(api: Client, agent: string): Promise<{ threadId: string; runId: string }> {
  const thread = await api.createThread(agent);
  const { runId } = await api.sendMessage(thread.id, "go");
  return { threadId: thread.id, runId };
}

async function finished(api: Client, runId: string): Promise<string> {
  for (let i = 0; i < 200; i++) {
    const run = await api.getRun(runId);
    if (["completed", "failed", "cancelled"].includes(run.status)) return run.status;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`run ${runId} did not finish`);
}

describe("useAgentThread", () => {
  it("shows a parked request live, drops it at once on approve, and follows the run to its end", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    const card = result.current.pendingInputs[0]!;
    expect(card).toMatchObject({ toolCallId: "c1", kind: "approval", toolName: "send", runName: "mailer", depth: 0 });

    let answered!: Promise<void>;
    act(() => {
      answered = result.current.respondToInput("c1", true);
    });
    // Before the server has answered.
    expect(result.current.pendingInputs).toEqual([]);
    await act(() => answered);
    expect(result.current.tooLate).toEqual([]);
    expect(result.current.error).toBeNull();

    expect(await finished(api, runId)).toBe("completed");
    await waitFor(() => expect(result.current.status).toBe("IDLE"));
    await waitFor(() =>
      expect(result.current.messages.some((m) => m.role === "assistant" && m.content === "Done.")).toBe(true),
    );
    expect(result.current.pendingInputs).toEqual([]);
    unmount();
  });

  it("reads only what is new: the stream starts after the thread's last event, messages after the last one", async () => {
    const reads: { url: string; lastEventId: string | null }[] = [];
    // What each read of the thread said its last event was.
    const threadReads: number[] = [];
    const recording: typeof fetch = async (input, init) => {
      const url = String(input);
      reads.push({ url, lastEventId: new Headers(init?.headers).get("Last-Event-ID") });
      const response = await fetch(input, init);
      if (/\/threads\/[^/]+$/.test(url) && response.ok) {
        threadReads.push(((await response.clone().json()) as Thread).lastEventId);
      }
      return response;
    };
    const api = client(recording);
    const { threadId, runId } = await parkedThread(api, "mailer");
    for (let i = 0; (await api.getThread(threadId)).pendingInputs.length === 0 && i < 200; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    reads.length = 0;
    threadReads.length = 0;

    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    await act(() => result.current.respondToInput("c1", true));
    expect(await finished(client(), runId)).toBe("completed");
    await waitFor(() => expect(result.current.status).toBe("IDLE"));
    const everything = await client().listMessages(threadId);
    await waitFor(() => expect(result.current.messages.map((m) => m.id)).toEqual(everything.map((m) => m.id)));

    // One stream, from the event the hook's first read of the thread named.
    const streams = reads.filter((read) => read.url.endsWith("/stream"));
    expect(threadReads[0]).toBeGreaterThan(0);
    expect(streams.map((read) => read.lastEventId)).toEqual([String(threadReads[0])]);
    const messageReads = reads.filter((read) => read.url.includes("/messages"));
    // The first read from the start; every later one after what it had.
    expect(messageReads[0]!.url).toMatch(/\/messages\?after=0$/);
    expect(messageReads.length).toBeGreaterThan(1);
    for (const read of messageReads.slice(1)) {
      expect(Number(new URL(read.url).searchParams.get("after"))).toBeGreaterThan(0);
    }
    unmount();
  });

  it("binds an answer to the arguments shown, and sends edits and a note", async () => {
    const sent: unknown[] = [];
    const recording: typeof fetch = (input, init) => {
      if (String(input).endsWith("/agent/tool-call/approve")) sent.push(JSON.parse(String(init?.body)));
      return fetch(input, init);
    };
    const api = client(recording);
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    const shown = result.current.pendingInputs[0]!;
    expect(shown.argumentsHash).toMatch(/^[0-9a-f]{64}$/);
    await act(() =>
      result.current.respondToInput("c1", true, undefined, { arguments: { to: "x@y.z" }, message: "changed" }),
    );
    expect(result.current.error).toBeNull();
    expect(sent).toEqual([
      { runId, toolCallId: "c1", arguments: { to: "x@y.z" }, message: "changed", argumentsHash: shown.argumentsHash },
    ]);
    expect(await finished(api, runId)).toBe("completed");
    unmount();
  });

  it("answers a request it does not list yet, asking the server instead of saying too late", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    for (let i = 0; i < 200 && (await api.getThread(threadId)).status !== "WAITING_FOR_INPUT"; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    // Before its first read: the hook lists nothing yet.
    expect(result.current.pendingInputs).toEqual([]);
    await act(() => result.current.respondToInput("c1", true));
    expect(result.current.tooLate).toEqual([]);
    expect(result.current.error).toBeNull();
    expect(await finished(api, runId)).toBe("completed");
    // By the run, too, once nothing is open any more: the server says.
    await act(() => result.current.respondToInput({ toolCallId: "c1", runId }, true));
    expect(result.current.tooLate).toEqual(["c1"]);
    unmount();
  });

  it("keeps a card answered elsewhere gone and names it too late", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    // Somebody else answers first.
    expect(await api.reject(runId, "c1", "not today")).toEqual({ delivered: true });
    await act(() => result.current.respondToInput("c1", true));
    expect(result.current.tooLate).toEqual(["c1"]);
    expect(result.current.pendingInputs).toEqual([]);
    expect(result.current.error).toBeNull();
    expect(await finished(api, runId)).toBe("completed");
    const journal = await api.getJournal(runId);
    expect(journal.find((e) => e.name.startsWith("tool:"))?.value).toMatchObject({ approved: false });
    unmount();
  });

  it("brings a card back with the error when its answer cannot be sent", async () => {
    // The network fails for answers only (a fault injected on purpose).
    const flaky: typeof fetch = (input, init) =>
      String(input).includes("/agent/tool-call/")
        ? Promise.reject(new TypeError("network down"))
        : fetch(input, init);
    const api = client(flaky);
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    let answered!: Promise<void>;
    act(() => {
      answered = result.current.respondToInput("c1", true);
    });
    expect(result.current.pendingInputs).toEqual([]);
    await act(() => answered);
    expect(result.current.pendingInputs.map((input) => input.toolCallId)).toEqual(["c1"]);
    expect(result.current.error?.message).toBe("network down");
    expect(result.current.tooLate).toEqual([]);
    // Still open on the server: answer it for real.
    expect(await client().approve(runId, "c1")).toEqual({ delivered: true });
    expect(await finished(api, runId)).toBe("completed");
    unmount();
  });

  it("clears a dropped stream's error once it reconnects", async () => {
    // The first stream request fails on the network, after the first read
    // (nothing else would clear the error: the run is parked, no event
    // comes); the retry connects.
    let streams = 0;
    const dropsOnce: typeof fetch = (input, init) =>
      String(input).endsWith("/stream") && streams++ === 0
        ? new Promise((_, reject) => setTimeout(() => reject(new TypeError("stream dropped")), 300))
        : fetch(input, init);
    const api = client(dropsOnce);
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.error?.message).toBe("stream dropped"));
    await waitFor(() => expect(result.current.error).toBeNull());
    expect(streams).toBeGreaterThanOrEqual(2);
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    await act(() => result.current.respondToInput("c1", true));
    expect(await finished(api, runId)).toBe("completed");
    unmount();
  });

  it("subscribes again when told to after a permanent refusal", async () => {
    // The stream is refused (as a revoked key would be) until fixed.
    let refused = true;
    let opened = 0;
    const refusing: typeof fetch = (input, init) =>
      String(input).endsWith("/stream") && (refused || (opened++, false))
        ? new Promise<Response>((resolve) =>
            // After the first read, which would clear the error otherwise.
            setTimeout(
              () =>
                resolve(
                  new Response(JSON.stringify({ error: "Unauthorized", message: "no" }), {
                    status: 401,
                    headers: { "Content-Type": "application/json" },
                  }),
                ),
              300,
            ),
          )
        : fetch(input, init);
    const api = client(refusing);
    const thread = await api.createThread("mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, thread.id));
    await waitFor(() => expect(result.current.error?.message).toBe("no"));
    // The refusal is permanent: nothing is retried until told.
    refused = false;
    act(() => result.current.resubscribe());
    await waitFor(() => expect(result.current.error).toBeNull());
    await waitFor(() => expect(opened).toBe(1));
    // Live again: a turn's request shows up through the new stream.
    const { runId } = await api.sendMessage(thread.id, "go");
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    await act(() => result.current.respondToInput("c1", true));
    expect(await finished(api, runId)).toBe("completed");
    unmount();
  });

  it("answers a question set and skips another", async () => {
    const api = client();
    const answered = await parkedThread(api, "asker");
    const skipped = await parkedThread(api, "asker");
    const first = renderHook(() => useAgentThread(api, answered.threadId));
    const second = renderHook(() => useAgentThread(api, skipped.threadId));
    await waitFor(() => expect(first.result.current.pendingInputs).toHaveLength(1));
    await waitFor(() => expect(second.result.current.pendingInputs).toHaveLength(1));
    const card = first.result.current.pendingInputs[0]!;
    expect(card.kind).toBe("ask");
    expect(card.request?.questions.map((q) => q.id)).toEqual(["scope"]);

    await act(() => first.result.current.answer(card.toolCallId, { scope: ["repo"] }));
    await act(() => second.result.current.skip(second.result.current.pendingInputs[0]!.toolCallId));
    expect(first.result.current.pendingInputs).toEqual([]);
    expect(second.result.current.pendingInputs).toEqual([]);
    expect(await finished(api, answered.runId)).toBe("completed");
    expect(await finished(api, skipped.runId)).toBe("completed");
    const journal = await api.getJournal(answered.runId);
    expect(journal.find((e) => e.name === "intake:answers")?.value).toMatchObject({
      status: "executed",
      answers: { scope: ["repo"] },
    });
    first.unmount();
    second.unmount();
  });
});

describe("useAgentThread, twice at once", () => {
  it("treats a second click on a card being answered as the same answer", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    await act(() => Promise.all([result.current.respondToInput("c1", true), result.current.respondToInput("c1", true)]));
    expect(result.current.tooLate).toEqual([]);
    expect(result.current.error).toBeNull();
    expect(await finished(api, runId)).toBe("completed");
    const journal = await api.getJournal(runId);
    expect(journal.find((e) => e.name.startsWith("tool:"))?.value).toMatchObject({ approved: true });
    unmount();
  });
});

describe("useAgentThread, talking to a busy thread", () => {
  it("queues a message while a run waits, shows it, and starts its turn once the run ends", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.pendingInputs).toHaveLength(1));
    let sent!: Awaited<ReturnType<typeof result.current.send>>;
    await act(async () => {
      sent = await result.current.send("also cc Dana", "enqueue");
    });
    expect(sent.queued).toBe(true);
    await waitFor(() => expect(result.current.queuedMessages.map((q) => q.content)).toEqual(["also cc Dana"]));
    expect(result.current.queuedMessages[0]!.runId).toBe(sent.runId);
    // Refused by default: the agent does not say otherwise.
    await expect(act(() => result.current.send("now?"))).rejects.toThrow(/active run/);

    await act(() => result.current.respondToInput("c1", true));
    expect(await finished(api, runId)).toBe("completed");
    // The queued turn runs (and parks on its own approval).
    await waitFor(() => expect(result.current.pendingInputs[0]?.runId).toBe(sent.runId));
    expect(result.current.queuedMessages).toEqual([]);
    await waitFor(() =>
      expect(result.current.messages.filter((m) => m.role === "user").map((m) => m.content)).toEqual([
        "go",
        "also cc Dana",
      ]),
    );
    await act(() => result.current.respondToInput(result.current.pendingInputs[0]!, true));
    expect(await finished(api, sent.runId)).toBe("completed");
    unmount();
  });

  it("edits a past message: the conversation is read again from the edited turn", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const { result, unmount } = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(result.current.messages.some((m) => m.role === "assistant")).toBe(true));
    const go = result.current.messages.find((m) => m.role === "user" && m.content === "go")!;
    let sent!: Awaited<ReturnType<typeof result.current.edit>>;
    await act(async () => {
      sent = await result.current.edit(go.id, "go, but gently");
    });
    expect(sent.interrupted).toEqual([runId]);
    await waitFor(() => expect(result.current.pendingInputs[0]?.runId).toBe(sent.runId));
    await waitFor(() =>
      expect(result.current.messages.filter((m) => m.role === "user").map((m) => m.content)).toEqual([
        "go, but gently",
      ]),
    );
    // The old turn's request is no longer current.
    const late = await api.approve(runId, "c1");
    expect(late).toEqual({ delivered: false, error: "This request is no longer current" });
    // Another client of the thread, told by the stream, reads it again
    // too; an edit of an idle thread (no run interrupted) tells it as well.
    const other = renderHook(() => useAgentThread(api, threadId));
    await waitFor(() => expect(other.result.current.pendingInputs[0]?.runId).toBe(sent.runId));
    await act(() => result.current.respondToInput(result.current.pendingInputs[0]!, true));
    expect(await finished(api, sent.runId)).toBe("completed");
    const gently = result.current.messages.find((m) => m.role === "user")!;
    let again!: Awaited<ReturnType<typeof result.current.edit>>;
    await act(async () => {
      again = await result.current.edit(gently.id, "go now");
    });
    expect(again.interrupted).toBeUndefined();
    await waitFor(() =>
      expect(other.result.current.messages.filter((m) => m.role === "user").map((m) => m.content)).toEqual([
        "go now",
      ]),
    );
    await waitFor(() => expect(result.current.pendingInputs[0]?.runId).toBe(again.runId));
    await act(() => result.current.respondToInput(result.current.pendingInputs[0]!, true));
    expect(await finished(api, again.runId)).toBe("completed");
    other.unmount();
    unmount();
  });

  it("forks a thread at a parked approval: the fork asks again, the original still waits", async () => {
    const api = client();
    const { threadId, runId } = await parkedThread(api, "mailer");
    const forked = await api.forkThread(threadId);
    expect(forked.forkedFrom).toBe(threadId);
    expect(forked.runId).toBeDefined();
    const { result, unmount } = renderHook(() => useAgentThread(api, forked.id));
    await waitFor(() => expect(result.current.pendingInputs[0]?.runId).toBe(forked.runId));
    expect(result.current.messages.filter((m) => m.role === "user").map((m) => m.content)).toEqual(["go"]);
    await act(() => result.current.respondToInput(result.current.pendingInputs[0]!, true));
    expect(await finished(api, forked.runId!)).toBe("completed");
    // The original's request is its own, still open.
    const original = await api.getThread(threadId);
    expect(original.pendingInputs.map((p) => p.runId)).toEqual([runId]);
    unmount();
  });
});
