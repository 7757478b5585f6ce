// A live `lancet serve` on a free loopback port, and the `@lancedb/lancedb` remote client on it.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import * as lancedb from "@lancedb/lancedb";

export const KEY = "ts-tests-admin-key";

/** A server on a fresh data directory; `args` are more `lancet serve` flags. */
export async function start(args = []) {
  const data = mkdtempSync(join(tmpdir(), "lancet-ts-"));
  const bin = process.env.LANCET_BIN || "lancet";
  const proc = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data", data, ...args], {
    // Jobs at normal CPU priority, as in the other suites (why: tests/api/common.rs).
    env: { ...process.env, LANCET_BOOTSTRAP_KEY: KEY, LANCET_BACKGROUND_PRIORITY: "normal" },
    stdio: ["ignore", "pipe", "ignore"],
  });
  const lines = createInterface({ input: proc.stdout });
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("lancet did not start in 60 s")), 60_000);
    proc.on("exit", (code) => reject(new Error(`lancet exited with ${code}`)));
    lines.on("line", (line) => {
      if (line.startsWith("listening on ")) {
        clearTimeout(timer);
        resolve(line.slice("listening on ".length).trim());
      }
    });
  });
  const db = await lancedb.connect("db://test", {
    apiKey: KEY,
    hostOverride: base,
    region: "us-east-1",
  });
  return {
    base,
    db,
    async stop() {
      db.close();
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** Rows `{id, text, vector}` for ids `from..from+n`, with 4-dimensional vectors. */
export function rows(n, from = 0) {
  return Array.from({ length: n }, (_, i) => {
    const id = from + i;
    return { id, text: `row ${id}`, vector: [id, id / 2, 1, -id].map(Number) };
  });
}

/** The error a promise rejects with (fails the test when it resolves). */
export async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error("expected an error");
}
