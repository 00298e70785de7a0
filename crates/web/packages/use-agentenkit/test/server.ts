// Starts a real `agentenkit dev` (API, worker and reaper in one process, on
// the real Postgres and RabbitMQ, in a schema and queue prefix of its own)
// for the tests; they reach it through `inject("baseUrl")`.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    baseUrl: string;
  }
}

export const ALICE = "alice-key";
export const BOB = "bob-key";

const AGENTS = `
[agents.mailer]
tools = ["send"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a@b.c" } } ] },
  { text = "Done." },
] }

[agents.asker]
model = { provider = "scripted", script = [ { text = "Done." } ] }

[agents.asker.intake]
preamble = "Two questions before I start."
when = "thread-start"
questions = [
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "This module" }, { value = "repo", label = "The repository" } ], defaults = ["module"] },
]

[tools.send]
type = "echo"
requires_confirmation = true
`;

let server: ChildProcess | undefined;
let dir: string | undefined;
let schema: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  const root = resolve(import.meta.dirname, "../../../../..");
  const binary = process.env.AGENTENKIT_BIN ?? join(root, "target/debug/agentenkit");
  if (!existsSync(binary)) {
    throw new Error(`no ${binary}: build it first (cargo build --bin agentenkit), or set AGENTENKIT_BIN`);
  }
  dir = mkdtempSync(join(tmpdir(), "use-agentenkit-"));
  writeFileSync(join(dir, "agents.toml"), AGENTS);
  const id = randomUUID().replaceAll("-", "");
  // `t_` like the Rust tests' schemas: `make clean-test-schemas` removes
  // what a failed run left.
  schema = `t_web_${id}`;
  const child = spawn(binary, ["dev"], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl(),
      AGENTENKIT_SCHEMA: schema,
      AGENTENKIT_QUEUE_PREFIX: `test.web.${id}`,
      AGENTENKIT_QUEUE_EXPIRES: "10m",
      AGENTENKIT_CONFIG: join(dir, "agents.toml"),
      AGENTENKIT_API_KEYS: `alice:${ALICE},bob:${BOB}`,
      AGENTENKIT_LISTEN: "127.0.0.1:0",
      AGENTENKIT_LOG_FORMAT: "json",
      RUST_LOG: "info,lapin=off",
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  server = child;
  const baseUrl = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("agentenkit dev did not start within 60 s")), 60_000);
    const lines = createInterface({ input: child.stderr! });
    const seen: string[] = [];
    lines.on("line", (line) => {
      seen.push(line);
      try {
        const entry = JSON.parse(line) as { fields?: { message?: string; addr?: string } };
        if (entry.fields?.addr && entry.fields.message?.startsWith("agentenkit dev")) {
          clearTimeout(timer);
          resolveUrl(`http://${entry.fields.addr}`);
        }
      } catch {
        // not a log line
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`agentenkit dev exited (${code}):\n${seen.slice(-20).join("\n")}`));
    });
  });
  project.provide("baseUrl", baseUrl);
}

export async function teardown(): Promise<void> {
  server?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (schema) {
    // Best effort: psql may not be on this machine.
    spawnSync("psql", [databaseUrl(), "-qc", `DROP SCHEMA IF EXISTS "${schema}" CASCADE`], { stdio: "ignore" });
  }
}

function databaseUrl(): string {
  return process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/agentenkit_test";
}
