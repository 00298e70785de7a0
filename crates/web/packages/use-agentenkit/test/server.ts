// The hook's tests run against a real `agentenkit dev` (test-support/dev.ts);
// they reach it through `inject("baseUrl")`.

import type { TestProject } from "vitest/node";

import { startDev, type DevServer } from "../../../test-support/dev";

export { ALICE, BOB } from "../../../test-support/dev";

declare module "vitest" {
  export interface ProvidedContext {
    baseUrl: string;
  }
}

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

let server: DevServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  server = await startDev(AGENTS);
  project.provide("baseUrl", server.baseUrl);
}

export async function teardown(): Promise<void> {
  server?.stop();
}
