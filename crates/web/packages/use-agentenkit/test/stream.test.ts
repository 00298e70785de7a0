// The client's live stream against a real `agentenkit dev`: a connection cut
// mid-stream resumes with Last-Event-ID, skipping and repeating nothing.

import { describe, expect, inject, it } from "vitest";

import { createClient, type ThreadEvent } from "../src";
import { ALICE } from "./server";

const baseUrl = inject("baseUrl");

describe("subscribe", () => {
  it("reconnects after a cut with Last-Event-ID and misses nothing", async () => {
    const resumedFrom: (string | null)[] = [];
    let streams = 0;
    // The first stream is cut after its first chunk (a network fault
    // injected on purpose); later ones pass through.
    const cutting: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (!String(input).endsWith("/stream")) return response;
      resumedFrom.push(new Headers(init?.headers).get("Last-Event-ID"));
      streams += 1;
      if (streams > 1 || !response.body) return response;
      const reader = response.body.getReader();
      const cut = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const { done, value } = await reader.read();
          if (!done && value) controller.enqueue(value);
          await reader.cancel();
          controller.error(new TypeError("connection reset"));
        },
      });
      return new Response(cut, { status: response.status, headers: response.headers });
    };
    const api = createClient({ baseUrl, apiKey: ALICE, fetch: cutting });
    const thread = await api.createThread("mailer");
    const { runId } = await api.sendMessage(thread.id, "go");

    const seen: ThreadEvent[] = [];
    const subscription = api.subscribe(thread.id, (event) => seen.push(event), { retryMs: 50 });
    // Wait for the park, then answer: the rest arrives on the new connection.
    await until(() => seen.some((e) => e.type === "INPUT_REQUIRED"));
    await createClient({ baseUrl, apiKey: ALICE }).approve(runId, "c1");
    await until(() => seen.some((e) => e.type === "RUN_COMPLETED"));
    subscription.close();

    expect(streams).toBeGreaterThanOrEqual(2);
    expect(resumedFrom[0]).toBeNull();
    expect(resumedFrom[1]).not.toBeNull();
    const ids = seen.map((e) => e.id);
    expect(ids).toEqual([...new Set(ids)].sort((a, b) => a - b));
    const all = await createClient({ baseUrl, apiKey: ALICE }).listEvents(thread.id);
    expect(ids).toEqual(all.map((e) => e.id));
  });

  it("stops on a refused key instead of retrying for ever", async () => {
    const api = createClient({ baseUrl, apiKey: "wrong" });
    const errors: unknown[] = [];
    const subscription = api.subscribe("00000000-0000-0000-0000-000000000000", () => {}, {
      onError: (e) => errors.push(e),
      retryMs: 10,
    });
    await until(() => errors.length > 0);
    await new Promise((r) => setTimeout(r, 200));
    subscription.close();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ status: 401 });
  });
});

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (condition()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("timed out");
}
