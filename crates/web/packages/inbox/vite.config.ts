import { resolve } from "node:path";

import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The build is committed at crates/api/ui and embedded in agentenkit-api,
// which serves it at /ui (so a `cargo build` needs no Node). `make test`
// rebuilds it and fails when the committed copy differs.
export default defineConfig({
  base: "/ui/",
  plugins: [react()],
  build: {
    outDir: process.env.INBOX_OUT_DIR ?? resolve(import.meta.dirname, "../../../api/ui"),
    emptyOutDir: true,
    // Small enough to read in a review; the API serves it compressed-free.
    sourcemap: false,
  },
});
