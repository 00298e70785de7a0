import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globalSetup: ["./test/server.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
