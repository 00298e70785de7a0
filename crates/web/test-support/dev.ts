// Starts a real `agentenkit dev` (API, worker and reaper in one process, on
// the real Postgres and RabbitMQ, in a schema and queue prefix of its own)
// for a test suite's globalSetup.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

export const ALICE = "alice-key";
export const BOB = "bob-key";

export interface DevServer {
  baseUrl: string;
  /** The Postgres schema it runs in (for a test that reads the tables). */
  schema: string;
  stop(): void;
}

/** `agentsToml` is the agent file (SPEC §10); keys are alice's and bob's. */
export async function startDev(agentsToml: string): Promise<DevServer> {
  const root = resolve(import.meta.dirname, "../../..");
  const binary = process.env.AGENTENKIT_BIN ?? join(root, "target/debug/agentenkit");
  if (!existsSync(binary)) {
    throw new Error(`no ${binary}: build it first (cargo build --bin agentenkit), or set AGENTENKIT_BIN`);
  }
  const dir = mkdtempSync(join(tmpdir(), "agentenkit-web-"));
  writeFileSync(join(dir, "agents.toml"), agentsToml);
  const id = randomUUID().replaceAll("-", "");
  // `t_` like the Rust tests' schemas: `make clean-test-schemas` removes
  // what a failed run left.
  const schema = `t_web_${id}`;
  const child: ChildProcess = spawn(binary, ["dev"], {
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
  const stop = () => {
    child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
    // Best effort: psql may not be on this machine.
    spawnSync("psql", [databaseUrl(), "-qc", `DROP SCHEMA IF EXISTS "${schema}" CASCADE`], { stdio: "ignore" });
  };
  const baseUrl = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("agentenkit dev did not start within 60 s")), 60_000);
    const lines = createInterface({ input: child.stderr! });
    const seen: string[] = [];
    lines.on("line", (line) => {
      seen.push(line);
      if (seen.length > 200) seen.shift();
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
  }).catch((e: unknown) => {
    stop();
    throw e;
  });
  return { baseUrl, schema, stop };
}

export function databaseUrl(): string {
  return process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/agentenkit_test";
}
