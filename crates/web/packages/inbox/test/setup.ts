// The page's end-to-end tests run against a real `agentenkit dev` (the API
// serving the embedded page at /ui, a worker and the reaper, on the real
// Postgres and RabbitMQ) and a small tool server that counts what it was
// asked to do.

import { spawnSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

import type { TestProject } from "vitest/node";

import { startDev, type DevServer } from "../../../test-support/dev";

declare module "vitest" {
  export interface ProvidedContext {
    baseUrl: string;
    toolUrl: string;
    /** Two keys of alice's threads whose holders are in `finance`. */
    financeKeys: string[];
  }
}

function agents(toolUrl: string): string {
  return `
[agents.mailer]
description = "Sends one email, after you approve it."
hitl_ttl_ms = 900000
tools = ["send"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "send", arguments = { to = "ada@example.com", subject = "Quarterly report", body = "Attached, as promised." } } ] },
  { text = "Sent." },
] }

[agents.trickster]
description = "Names an attachment the way a trick would."
tools = ["send"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "t1", name = "send", arguments = { attachment = "invoice\\u202Egnp.exe" } } ] },
  { text = "Sent." },
] }

[agents.jobber]
description = "Waits for a job on another system."
tools = ["job"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "j1", name = "job", arguments = { ticket = "T-1" } } ] },
  { text = "The job is done." },
] }

[agents.asker]
description = "Asks two questions before it starts."
model = { provider = "scripted", script = [ { text = "Done." } ] }

[agents.asker.intake]
preamble = "Two questions before I start."
when = "thread-start"
questions = [
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "This module only" }, { value = "repo", label = "The whole repository" } ], defaults = ["module"] },
  { id = "checks", prompt = "Which checks?", multiple = true, options = [ { value = "tests", label = "Tests" }, { value = "lint", label = "Lint" }, { value = "docs", label = "Docs" } ], defaults = ["tests", "lint"] },
]

[agents.former]
description = "Asks for a text and a number before it starts."
model = { provider = "scripted", script = [ { text = "Done." } ] }

[agents.former.intake]
when = "every-turn"
questions = [
  { id = "reason", prompt = "Why?", kind = "text", required = true, min = 3, options = [], defaults = [] },
  { id = "hours", prompt = "Within how many hours?", kind = "integer", min = 1, max = 72, options = [], defaults = ["24"] },
]

[agents.linker]
description = "Sends the person to a page before it starts."
model = { provider = "scripted", script = [ { text = "Done." } ] }

[agents.linker.intake]
when = "every-turn"
questions = [
  { id = "sso", prompt = "Sign in to the ticket system.", link = "https://sso.example.com/start?client=tickets", required = true, options = [ { value = "done", label = "Done" } ], defaults = [] },
]

[tools.send]
type = "http"
url = "${toolUrl}/send"
requires_confirmation = true
input_schema = { type = "object", properties = { to = { type = "string" }, subject = { type = "string" }, body = { type = "string" } } }

[agents.accountant]
description = "Pays into an account whose number is past 2^53."
tools = ["send"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "a1", name = "send", arguments = { to = "ada@example.com", account = 9007199254740993 } } ] },
  { text = "Paid." },
] }

[agents.treasurer]
description = "Wires money once two people of finance approve."
tools = ["wire"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "w1", name = "wire", arguments = { amount = 1200, to = "ACME Ltd" } } ] },
  { text = "Wired." },
] }

[tools.job]
type = "http"
url = "${toolUrl}/job"

[tools.wire]
type = "http"
url = "${toolUrl}/send"
requires_confirmation = true
approvals = { required = 2, from = ["finance"] }
`;
}

/** `POST /send` answers `{sent: true}`, `POST /job` parks the call as a
 * job; `GET /calls` lists every body received (parsed, and as it came). */
function startTools(): Promise<Server> {
  const calls: { path: string; body: unknown; text: string }[] = [];
  const server = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk: Buffer) => (text += chunk.toString()));
    request.on("end", () => {
      response.setHeader("Content-Type", "application/json");
      if (request.method === "GET" && request.url === "/calls") {
        response.end(JSON.stringify(calls));
        return;
      }
      calls.push({ path: request.url ?? "", body: text ? (JSON.parse(text) as unknown) : null, text });
      if (request.url === "/job") {
        response.end(JSON.stringify({ park: { reason: "job", payload: { ticket: "T-1" }, ttlMs: 600_000 } }));
      } else {
        response.end(JSON.stringify({ sent: true }));
      }
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** A key made as an operator makes one (`agentenkit keys create`). */
function financeKey(schema: string): string {
  const made = spawnSync(
    process.env.AGENTENKIT_BIN ?? join(import.meta.dirname, "../../../../../target/debug/agentenkit"),
    ["keys", "create", "--owner", "alice", "--scope", "read", "--scope", "respond:approvals", "--group", "finance"],
    {
      encoding: "utf8",
      env: {
        ...process.env,
        DATABASE_URL: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/agentenkit_test",
        AGENTENKIT_SCHEMA: schema,
      },
    },
  );
  if (made.status !== 0) throw new Error(`agentenkit keys create failed: ${made.stderr}`);
  return made.stdout.split("\n")[0]!;
}

let tools: Server | undefined;
let dev: DevServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  tools = await startTools();
  const toolUrl = `http://127.0.0.1:${(tools.address() as AddressInfo).port}`;
  dev = await startDev(agents(toolUrl));
  project.provide("baseUrl", dev.baseUrl);
  project.provide("toolUrl", toolUrl);
  project.provide("financeKeys", [financeKey(dev.schema), financeKey(dev.schema)]);
}

export async function teardown(): Promise<void> {
  dev?.stop();
  tools?.close();
}
