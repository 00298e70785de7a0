// The inbox page end to end (SPEC §13): Debian's chromium, driven by
// playwright-core, against a real API, worker, Postgres and RabbitMQ (see
// setup.ts). The accessible names are the page's contract.

import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";

import { chromium, type Browser, type BrowserContext, type Locator, type Page } from "playwright-core";
import { afterAll, beforeAll, beforeEach, afterEach, describe, expect, inject, it } from "vitest";

import { createClient, type Client, type JournalEntry } from "use-agentenkit";

import { ALICE, BOB } from "../../../test-support/dev";

const baseUrl = inject("baseUrl");
const toolUrl = inject("toolUrl");
const alice: Client = createClient({ baseUrl, apiKey: ALICE });
const SCREENSHOTS = process.env.AGENTENKIT_SCREENSHOTS ?? resolve(import.meta.dirname, "../../../../../target/screenshots");

let browser: Browser;
let context: BrowserContext;
let page: Page;

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // Root in a container has no user namespaces for chromium's sandbox.
    args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
  });
});
afterAll(async () => {
  await browser?.close();
});
beforeEach(async () => {
  context = await browser.newContext({ viewport: { width: 900, height: 760 } });
  page = await context.newPage();
});
afterEach(async () => {
  await context.close();
  // Every test leaves nothing open: the next one counts cards from zero.
  const open = await alice.inbox();
  expect(open).toEqual([]);
});

async function signIn(target: Page, key = ALICE): Promise<void> {
  await target.goto(`${baseUrl}/ui/`);
  await target.getByLabel("API key").fill(key);
  await target.getByRole("button", { name: "Sign in" }).click();
  await target.getByRole("heading", { name: "Inbox" }).waitFor();
}

async function parked(agent: string): Promise<{ threadId: string; runId: string }> {
  const thread = await alice.createThread(agent);
  const { runId } = await alice.sendMessage(thread.id, "go");
  await eventually(`${agent} parks`, async () => (await alice.getThread(thread.id)).status === "WAITING_FOR_INPUT");
  return { threadId: thread.id, runId };
}

async function finished(runId: string): Promise<string> {
  let status = "";
  await eventually(`run ${runId} finishes`, async () => {
    status = (await alice.getRun(runId)).status;
    return ["completed", "failed", "cancelled"].includes(status);
  });
  return status;
}

async function journalValue(runId: string, name: (entry: JournalEntry) => boolean): Promise<unknown> {
  return (await alice.getJournal(runId)).find(name)?.value;
}

async function sendBodies(): Promise<{ arguments?: unknown }[]> {
  const calls = (await (await fetch(`${toolUrl}/calls`)).json()) as { path: string; body: { arguments?: unknown } }[];
  return calls.filter((call) => call.path === "/send").map((call) => call.body);
}

/** The bodies of `/send` as the tool got them, unparsed. */
async function sendTexts(): Promise<string[]> {
  const calls = (await (await fetch(`${toolUrl}/calls`)).json()) as { path: string; text: string }[];
  return calls.filter((call) => call.path === "/send").map((call) => call.text);
}

async function sends(): Promise<number> {
  return (await sendBodies()).length;
}

/** What the model read as call `callId`'s result. */
async function toolResult(threadId: string, callId: string): Promise<unknown> {
  const messages = await alice.listMessages(threadId);
  return messages.find((m) => m.role === "tool" && (m as { toolCallId?: string }).toolCallId === callId)?.content;
}

async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function screenshot(target: Locator | Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await target.screenshot({ path: join(SCREENSHOTS, name) });
}

describe("sign-in", () => {
  it("refuses a wrong key with an alert, keeps a good one for this tab only", async () => {
    await page.goto(`${baseUrl}/ui/`);
    await page.getByLabel("API key").fill("not-a-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").waitFor();
    expect(await page.getByRole("alert").textContent()).toContain("refused");
    expect(await page.getByRole("heading", { name: "Inbox" }).count()).toBe(0);
    expect(await page.getByLabel("API key").isVisible()).toBe(true);

    await page.getByLabel("API key").fill(ALICE);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Inbox" }).waitFor();
    expect(await page.evaluate(() => [sessionStorage.length, localStorage.length])).toEqual([1, 0]);
    expect(await page.evaluate(() => document.cookie)).toBe("");

    await page.reload();
    await page.getByRole("heading", { name: "Inbox" }).waitFor();
    const otherTab = await context.newPage();
    await otherTab.goto(`${baseUrl}/ui/`);
    await otherTab.getByLabel("API key").waitFor();
    expect(await otherTab.getByRole("heading", { name: "Inbox" }).count()).toBe(0);
  });
});

describe("inbox", () => {
  it("shows a parked run's card live; Approve drops it before the answer returns and the tool runs once", async () => {
    await signIn(page);
    await page.getByText("Nothing is waiting for you.").waitFor();
    const before = await sends();
    const { runId } = await parked("mailer");
    const card = page.getByRole("article");
    // Live, without a reload (the page polls every 2 s; SPEC: within 5 s).
    await card.waitFor({ timeout: 5000 });
    const text = (await card.textContent()) ?? "";
    expect(text).toContain("mailer");
    expect(text).toContain("depth 0");
    expect(text).toMatch(/1[45] min left/);
    expect(await card.getByRole("heading").textContent()).toBe("send");
    expect(await card.getByLabel("Arguments").textContent()).toBe(
      JSON.stringify({ body: "Attached, as promised.", subject: "Quarterly report", to: "ada@example.com" }, null, 2),
    );
    await screenshot(page, "inbox.png");

    // Hold the answer on its way: the card is gone before it returns.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await page.route("**/agent/tool-call/approve", async (route) => {
      await held;
      await route.continue();
    });
    await card.getByRole("button", { name: "Approve" }).click();
    await card.waitFor({ state: "detached", timeout: 2000 });
    release();

    expect(await finished(runId)).toBe("completed");
    expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({ approved: true });
    expect((await sends()) - before).toBe(1);
    // Polls after the answer do not bring the card back, nor a "Too late".
    await page.waitForTimeout(2500);
    expect(await page.getByRole("article").count()).toBe(0);
    expect(await page.getByText("Too late").count()).toBe(0);
  });

  it("shows a right-to-left override in the arguments as its escape, not reversed text", async () => {
    const { threadId, runId } = await parked("trickster");
    await signIn(page);
    const card = page.getByRole("article");
    // The card says which version of its agent will run the call.
    const version = (await alice.getThread(threadId)).pendingInputs[0]?.agentVersion ?? "";
    expect(version).toMatch(/^[0-9a-f]{64}$/);
    await card.getByText(`version ${version.slice(0, 12)}`).waitFor();
    const shownArguments = (await card.getByLabel("Arguments").textContent()) ?? "";
    expect(shownArguments).toContain("invoice\\u{202e}gnp.exe");
    expect(shownArguments).not.toContain("\u202e");
    await card.getByRole("button", { name: "Deny" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
  });

  it("shows an integer past 2^53 exactly, and an edit elsewhere sends it to the tool unchanged", async () => {
    const before = (await sendTexts()).length;
    const { runId } = await parked("accountant");
    await signIn(page);
    const card = page.getByRole("article");
    expect(await card.getByLabel("Arguments").textContent()).toContain("9007199254740993");
    await card.getByRole("button", { name: "Edit" }).click();
    const editor = card.getByLabel("Edited arguments");
    const draft = await editor.inputValue();
    expect(draft).toContain("9007199254740993");
    await editor.fill(draft.replace("ada@example.com", "grace@example.com"));
    await card.getByRole("button", { name: "Approve with edits" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
    const texts = await sendTexts();
    expect(texts.length - before).toBe(1);
    expect(texts.at(-1)).toContain('"account":9007199254740993');
    expect(texts.at(-1)).toContain("grace@example.com");
  });

  it("Deny rejects the call and the tool never runs", async () => {
    const before = await sends();
    const { runId } = await parked("mailer");
    await signIn(page);
    const card = page.getByRole("article");
    await card.getByRole("button", { name: "Deny" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
    expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({
      status: "rejected",
      approved: false,
    });
    expect(await sends()).toBe(before);
  });

  it("approves with edited arguments and a note: the tool runs once with the edits, the model reads both", async () => {
    const before = await sends();
    const { threadId, runId } = await parked("mailer");
    await signIn(page);
    const card = page.getByRole("article");
    await card.getByRole("button", { name: "Edit" }).click();
    const editor = card.getByLabel("Edited arguments");
    const edited = { to: "grace@example.com", subject: "Quarterly report", body: "Attached." };
    // Not JSON: said on the card, nothing sent.
    await editor.fill("{ to: grace");
    await card.getByRole("button", { name: "Approve with edits" }).click();
    expect(await card.getByRole("alert").textContent()).toContain("not JSON");
    await editor.fill(JSON.stringify(edited, null, 2));
    await card.getByLabel("Note or reason (optional)").fill("Grace owns this report now");
    await screenshot(card, "edit.png");
    await card.getByRole("button", { name: "Approve with edits" }).click();
    await card.waitFor({ state: "detached" });

    expect(await finished(runId)).toBe("completed");
    const bodies = await sendBodies();
    expect(bodies.length - before).toBe(1);
    expect(bodies.at(-1)!.arguments).toEqual(edited);
    expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({
      approved: true,
      arguments: edited,
      message: "Grace owns this report now",
      answeredBy: "alice",
    });
    expect(await toolResult(threadId, "c1")).toMatchObject({
      result: { sent: true },
      editedArguments: edited,
      message: "Grace owns this report now",
    });
  });

  it("refuses edits that do not fit the tool's schema with an alert, and the card comes back", async () => {
    const { runId } = await parked("mailer");
    await signIn(page);
    const card = page.getByRole("article");
    await card.getByRole("button", { name: "Edit" }).click();
    await card.getByLabel("Edited arguments").fill(JSON.stringify({ to: 7 }));
    await card.getByRole("button", { name: "Approve with edits" }).click();
    await page.getByRole("alert").filter({ hasText: "do not fit" }).waitFor();
    await card.getByRole("button", { name: "Deny" }).waitFor();
    expect((await alice.getRun(runId)).status).toBe("waiting");
    await card.getByRole("button", { name: "Deny" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
  });

  it("denies with a reason the model reads", async () => {
    const { threadId, runId } = await parked("mailer");
    await signIn(page);
    const card = page.getByRole("article");
    await card.getByLabel("Note or reason (optional)").fill("Not before the board meeting");
    await card.getByRole("button", { name: "Deny" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
    expect(await toolResult(threadId, "c1")).toEqual({ denied: true, reason: "Not before the board meeting" });
  });

  it("approves selected requests in one retry-safe request, each bound to the arguments its card shows", async () => {
    const before = await sends();
    const first = await parked("mailer");
    const second = await parked("mailer");
    await signIn(page);
    const cards = page.getByRole("article");
    await eventually("both cards", async () => (await cards.count()) === 2);
    const requests: { key: string | null; body: { decisions: { action: string; argumentsHash?: string }[] } }[] = [];
    await page.route("**/agent/decisions", async (route) => {
      requests.push({ key: route.request().headers()["idempotency-key"] ?? null, body: route.request().postDataJSON() });
      await route.continue();
    });
    const bar = page.getByRole("toolbar", { name: "Selected requests" });
    expect(await bar.count()).toBe(0);
    await cards.nth(0).getByRole("checkbox", { name: "Select" }).check();
    await cards.nth(1).getByRole("checkbox", { name: "Select" }).check();
    expect(await bar.getByText("2 selected").isVisible()).toBe(true);
    await bar.getByLabel("Note or reason for all (optional)").fill("Both are fine");
    await screenshot(page, "selected.png");
    await bar.getByRole("button", { name: "Approve selected" }).click();
    await eventually("both cards leave", async () => (await cards.count()) === 0);
    expect(await bar.count()).toBe(0);

    expect(await finished(first.runId)).toBe("completed");
    expect(await finished(second.runId)).toBe("completed");
    expect((await sends()) - before).toBe(2);
    expect(requests).toHaveLength(1);
    expect(requests[0]!.key).toMatch(/^[0-9a-f]{32}$/);
    expect(requests[0]!.body.decisions.map((d) => d.action)).toEqual(["approve", "approve"]);
    expect(requests[0]!.body.decisions.every((d) => /^[0-9a-f]{64}$/.test(d.argumentsHash ?? ""))).toBe(true);
    for (const { threadId, runId } of [first, second]) {
      expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({
        approved: true,
        message: "Both are fine",
        answeredBy: "alice",
      });
      expect(await toolResult(threadId, "c1")).toMatchObject({ message: "Both are fine" });
    }
  });

  it("denies selected requests with one reason the model reads in each", async () => {
    const before = await sends();
    const first = await parked("mailer");
    const second = await parked("mailer");
    await signIn(page);
    const cards = page.getByRole("article");
    await eventually("both cards", async () => (await cards.count()) === 2);
    for (const index of [0, 1]) await cards.nth(index).getByRole("checkbox", { name: "Select" }).check();
    const bar = page.getByRole("toolbar", { name: "Selected requests" });
    await bar.getByLabel("Note or reason for all (optional)").fill("Not this quarter");
    await bar.getByRole("button", { name: "Deny selected" }).click();
    await eventually("both cards leave", async () => (await cards.count()) === 0);
    for (const { threadId, runId } of [first, second]) {
      expect(await finished(runId)).toBe("completed");
      expect(await toolResult(threadId, "c1")).toEqual({ denied: true, reason: "Not this quarter" });
    }
    expect(await sends()).toBe(before);
  });

  it("shows a call several people must approve with its count, and the second approval settles it", async () => {
    const [first, second] = inject("financeKeys");
    const { threadId, runId } = await parked("treasurer");
    const before = await sends();
    // One person of finance approves from elsewhere: the call waits on.
    const firstApprover = createClient({ baseUrl, apiKey: first! });
    expect(await firstApprover.approve(runId, "w1")).toEqual({ delivered: true, approvals: { given: 1, required: 2 } });
    await signIn(page);
    const card = page.getByRole("article");
    await card.getByText("1 of 2 approvals").waitFor();
    expect(await card.getByRole("button", { name: "Edit" }).count()).toBe(0);
    await screenshot(card, "two-approvals.png");
    await page.getByRole("button", { name: "Sign out" }).click();
    // The second person of finance signs in with their own key.
    await signIn(page, second!);
    await card.getByText("1 of 2 approvals").waitFor();
    await card.getByRole("button", { name: "Approve" }).click();
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
    expect((await sends()) - before).toBe(1);
    const decision = (await journalValue(runId, (e) => e.name.startsWith("tool:"))) as { approvals: unknown[] };
    expect(decision.approvals).toHaveLength(2);
    expect(await toolResult(threadId, "w1")).toEqual({ sent: true });
  });

  it("shows a job as a status line without buttons", async () => {
    const { threadId, runId } = await parked("jobber");
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    expect(await card.getByText("Waiting for job").isVisible()).toBe(true);
    expect(await card.getByRole("button").count()).toBe(0);
    expect(await card.textContent()).toContain("jobber");
    // The other system finishes the job; the card leaves by itself.
    expect(await alice.respond(threadId, "j1", true, { ticket: "T-1", done: true })).toEqual({ delivered: true });
    await card.waitFor({ state: "detached", timeout: 5000 });
    expect(await finished(runId)).toBe("completed");
  });

  it("answers typed questions: a required text and an integer, with their bounds", async () => {
    const answered = await parked("former");
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    const reason = card.getByRole("textbox", { name: "Why?" });
    const hours = card.getByRole("spinbutton", { name: "Within how many hours?" });
    expect(await reason.inputValue()).toBe("");
    expect(await hours.inputValue()).toBe("24");
    // The required text stops an empty submit in the browser: nothing is sent.
    await hours.press("Enter");
    expect(await (await alice.getThread(answered.threadId)).status).toBe("WAITING_FOR_INPUT");
    await reason.fill("the printer is on fire");
    await hours.fill("4");
    await hours.press("Enter");
    await card.waitFor({ state: "detached", timeout: 2000 });
    expect(await finished(answered.runId)).toBe("completed");
    expect(await journalValue(answered.runId, (e) => e.name === "intake:answers")).toMatchObject({
      status: "executed",
      answers: { reason: ["the printer is on fire"], hours: ["4"] },
      defaulted: [],
    });
  });

  it("shows a question's page as a link with its whole address, opened apart", async () => {
    const answered = await parked("linker");
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    const link = card.getByRole("link", { name: "https://sso.example.com/start?client=tickets" });
    expect(await link.getAttribute("href")).toBe("https://sso.example.com/start?client=tickets");
    expect(await link.getAttribute("target")).toBe("_blank");
    expect(await link.getAttribute("rel")).toBe("noopener noreferrer");
    // Nothing is pre-picked: the person says Done once they have been there.
    const done = card.getByRole("radio", { name: "Done" });
    expect(await done.isChecked()).toBe(false);
    await done.check();
    await card.getByRole("button", { name: "Submit" }).click();
    await card.waitFor({ state: "detached", timeout: 2000 });
    expect(await finished(answered.runId)).toBe("completed");
    expect(await journalValue(answered.runId, (e) => e.name === "intake:answers")).toMatchObject({
      answers: { sso: ["done"] },
    });
  });

  it("answers a question set with a changed choice (Enter submits), and skips another", async () => {
    const answered = await parked("asker");
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    const first = card.getByRole("group", { name: /Question 1 of 2/ });
    const second = card.getByRole("group", { name: /Question 2 of 2/ });
    expect(await first.getByRole("radio", { name: "This module only" }).isChecked()).toBe(true);
    expect(await first.getByRole("radio", { name: "The whole repository" }).isChecked()).toBe(false);
    expect(await second.getByRole("checkbox", { name: "Tests" }).isChecked()).toBe(true);
    expect(await second.getByRole("checkbox", { name: "Lint" }).isChecked()).toBe(true);
    expect(await second.getByRole("checkbox", { name: "Docs" }).isChecked()).toBe(false);
    expect(await card.getByRole("button", { name: "Skip" }).isVisible()).toBe(true);
    await screenshot(card, "question.png");

    await first.getByRole("radio", { name: "The whole repository" }).check();
    // The first answer is lost on the network: the card comes back with
    // the error and with the person's choice, not the defaults.
    await page.route("**/agent/tool-call/answer", (route) => route.abort("internetdisconnected"), { times: 1 });
    await first.getByRole("radio", { name: "The whole repository" }).press("Enter");
    await page.getByRole("alert").waitFor();
    expect(await first.getByRole("radio", { name: "The whole repository" }).isChecked()).toBe(true);
    expect(await (await alice.getThread(answered.threadId)).status).toBe("WAITING_FOR_INPUT");
    await first.getByRole("radio", { name: "The whole repository" }).press("Enter");
    await card.waitFor({ state: "detached", timeout: 2000 });
    // The error goes once the answer has gone through.
    await page.getByRole("alert").waitFor({ state: "detached" });
    expect(await finished(answered.runId)).toBe("completed");
    // Only the changed question was sent: the other is recorded as defaulted.
    expect(await journalValue(answered.runId, (e) => e.name === "intake:answers")).toMatchObject({
      status: "executed",
      answers: { scope: ["repo"], checks: ["tests", "lint"] },
      defaulted: ["checks"],
    });

    const skipped = await parked("asker");
    await card.waitFor({ timeout: 5000 });
    await card.getByRole("button", { name: "Skip" }).click();
    await card.waitFor({ state: "detached", timeout: 2000 });
    expect(await finished(skipped.runId)).toBe("completed");
    expect(await journalValue(skipped.runId, (e) => e.name === "intake:answers")).toMatchObject({
      status: "rejected",
      defaulted: ["scope", "checks"],
    });
  });

  it("shows Too late for a request answered elsewhere first", async () => {
    const { runId } = await parked("mailer");
    await page.clock.install();
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    // From here the page's clock stands still: no poll can remove the card
    // between the answer given elsewhere and the click.
    await page.clock.pauseAt(await page.evaluate(() => Date.now() + 10));
    expect(await alice.reject(runId, "c1", "handled by phone")).toEqual({ delivered: true });
    await card.getByRole("button", { name: "Approve" }).click();
    await page.getByText("Too late").waitFor();
    expect(await page.getByRole("alert").count()).toBe(0);
    expect(await page.getByRole("article").count()).toBe(0);
    expect(await finished(runId)).toBe("completed");
    expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({ approved: false });
  });

  it("fits a phone's width: no sideways scrolling, the answer buttons in view", async () => {
    const { runId } = await parked("mailer");
    await page.setViewportSize({ width: 360, height: 740 });
    await signIn(page);
    const card = page.getByRole("article");
    await card.waitFor();
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    for (const name of ["Approve", "Deny"]) {
      const box = await card.getByRole("button", { name }).boundingBox();
      expect(box).not.toBeNull();
      expect(box!.x).toBeGreaterThanOrEqual(0);
      expect(box!.x + box!.width).toBeLessThanOrEqual(360);
    }
    // Keyboard-first: Tab reaches Approve (after the page's links), Enter presses it.
    let focused = "";
    for (let presses = 0; presses < 10 && focused !== "Approve"; presses++) {
      await page.keyboard.press("Tab");
      focused = await page.evaluate(() => document.activeElement?.textContent ?? "");
    }
    expect(focused).toBe("Approve");
    await page.keyboard.press("Enter");
    await card.waitFor({ state: "detached" });
    expect(await finished(runId)).toBe("completed");
    expect(await journalValue(runId, (e) => e.name.startsWith("tool:"))).toMatchObject({ approved: true });
  });

  it("shows another owner nothing", async () => {
    const { runId } = await parked("mailer");
    await signIn(page, BOB);
    await page.getByText("Nothing is waiting for you.").waitFor();
    await page.waitForTimeout(2500);
    expect(await page.getByRole("article").count()).toBe(0);
    expect(await alice.approve(runId, "c1")).toEqual({ delivered: true });
    expect(await finished(runId)).toBe("completed");
  });
});

describe("threads", () => {
  it("starts a thread with an agent and answers its approval in place", async () => {
    const before = await sends();
    await signIn(page);
    await page.getByRole("link", { name: "Threads" }).click();
    const agent = page.getByLabel("Agent");
    await agent.locator("option", { hasText: "mailer" }).waitFor({ state: "attached" });
    await agent.selectOption("mailer");
    await page.getByLabel("Message").fill("Send Ada the quarterly report.");
    await page.getByRole("button", { name: "Send" }).click();

    const thread = page.getByRole("region", { name: "Thread" });
    await thread.getByText("Send Ada the quarterly report.").waitFor();
    const card = thread.getByRole("article");
    await card.getByRole("button", { name: "Approve" }).click();
    await thread.getByText("Sent.").waitFor({ timeout: 10_000 });
    await thread.getByText("Idle").waitFor();
    expect(page.url()).toMatch(/\/ui\/threads\/[0-9a-f-]+$/);
    expect((await sends()) - before).toBe(1);
    // The tool call and its result are shown too.
    expect(await thread.textContent()).toContain("calls send");
    expect(await thread.textContent()).toContain('"sent": true');
  });
});

describe("a busy thread", () => {
  it("queues a message while the agent waits, runs it next, and edits a past message", async () => {
    await signIn(page);
    await page.getByRole("link", { name: "Threads" }).click();
    const agent = page.getByLabel("Agent");
    await agent.locator("option", { hasText: "mailer" }).waitFor({ state: "attached" });
    await agent.selectOption("mailer");
    await page.getByLabel("Message").fill("Send Ada the report.");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    const thread = page.getByRole("region", { name: "Thread" });
    const card = thread.getByRole("article");
    await card.waitFor();
    const threadId = page.url().split("/").pop()!;
    const first = (await alice.getThread(threadId)).currentRunId!;

    // While the agent waits for the approval: queued, and shown as such.
    expect(await page.getByLabel("If a turn is working").inputValue()).toBe("enqueue");
    await page.getByLabel("Message").fill("Also send Bo the minutes.");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    const queued = thread.getByRole("list", { name: "Queued messages" });
    await queued.getByText("Also send Bo the minutes.").waitFor();
    await screenshot(thread, "thread-queued.png");

    // The turn ends; the queued one runs next (and asks its own approval).
    await card.getByRole("button", { name: "Approve" }).click();
    expect(await finished(first)).toBe("completed");
    await queued.waitFor({ state: "detached" });
    await eventually("the queued turn parks", async () => {
      const view = await alice.getThread(threadId);
      return view.currentRunId !== first && view.status === "WAITING_FOR_INPUT";
    });
    const second = (await alice.getThread(threadId)).currentRunId!;
    await thread.getByText("Also send Bo the minutes.").waitFor();

    // Edit the first message: the turns from it on leave the conversation.
    await thread.getByRole("button", { name: "Edit “Send Ada the report.”" }).click();
    await thread.getByLabel("Edited message").fill("Send Ada the summary.");
    await thread.getByRole("button", { name: "Send edit" }).click();
    await thread.getByText("Send Ada the summary.").waitFor();
    await thread.getByText("Send Ada the report.").waitFor({ state: "detached" });
    await thread.getByText("Also send Bo the minutes.").waitFor({ state: "detached" });
    expect(await alice.approve(second, "c1")).toEqual({
      delivered: false,
      error: "This request is no longer current",
    });
    const third = (await alice.getThread(threadId)).currentRunId!;
    expect(third).not.toBe(second);
    await thread.getByRole("article").getByRole("button", { name: "Approve" }).click();
    expect(await finished(third)).toBe("completed");
  });
});
