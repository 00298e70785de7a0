import { defineConfig } from "vitest/config";

// The page end to end: a real agentenkit dev, the built page it serves at
// /ui, and Debian's chromium driven by playwright-core.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["./test/setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 90_000,
  },
});
