// A real bus for the tests: `storybus dev` on ports the system picks and a
// fresh data directory, stopped after the tests.

import { type ChildProcess, spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** packageDir is clients/typescript. */
export const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
/** repoDir is the root of the storybus repository. */
export const repoDir = path.resolve(packageDir, "../..");

/** The development secrets of `storybus dev`'s sample connections. */
export const CMS_SECRET = "cms-dev-secret-0123456789abcdef0";
export const WIRE_SECRET = "wire-dev-secret-0123456789abcdef";
export const WORKSPACE = "newsroom";

/** storybusBinary is the storybus binary the tests run: STORYBUS_BIN, or the one pretest built. */
export function storybusBinary(): string {
  const bin = process.env.STORYBUS_BIN || path.join(packageDir, ".test-build", "storybus");
  if (!existsSync(bin)) throw new Error(`no storybus binary at ${bin}: run npm test (its pretest builds one) or set STORYBUS_BIN`);
  return bin;
}

/** buildStorybus builds the storybus binary for the tests unless STORYBUS_BIN names one. */
export function buildStorybus(): void {
  if (process.env.STORYBUS_BIN) return;
  execFileSync("go", ["build", "-o", path.join(packageDir, ".test-build", "storybus"), "./cmd/storybus"], {
    cwd: repoDir,
    stdio: "inherit",
  });
}

/** banner is the line `storybus dev` prints once it listens: its publish and operations URLs. */
const banner = /on (https?:\/\/\S+) \(operations on (http:\/\/\S+)\)/;

/** Bus is a running `storybus dev`. */
export interface Bus {
  /** url is the publish port's base URL. */
  url: string;
  /** opsUrl is the operations port's base URL. */
  opsUrl: string;
  /** output is what the bus wrote so far, for failure messages. */
  output(): string;
  stop(): Promise<void>;
}

/**
 * startDev starts `storybus dev` with args beside its addresses and data dir, and waits until it is ready.
 * It listens on ports the system picks, read from its banner: a port picked free beforehand may be taken
 * (by the bus's own embedded store among others) before the bus binds it.
 */
export async function startDev(args: string[] = []): Promise<Bus> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-bus-"));
  const child: ChildProcess = spawn(
    storybusBinary(),
    ["dev", "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--data-dir", dataDir, "--access-log=false", ...args],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout?.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr?.on("data", (b: Buffer) => (out += b.toString()));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.on("exit", () => ((exited = true), resolve())));
  const bus: Bus = {
    url: "",
    opsUrl: "",
    output: () => out,
    stop: async () => {
      if (!exited) {
        child.kill("SIGTERM");
        const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
        await exit;
        clearTimeout(killer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (exited) throw new Error(`storybus dev exited before it was ready:\n${out}`);
    const m = bus.url ? null : banner.exec(out);
    if (m?.[1] && m[2]) [bus.url, bus.opsUrl] = [m[1], m[2]];
    if (bus.opsUrl) {
      try {
        const res = await fetch(`${bus.opsUrl}/readyz`);
        if (res.status === 200) return bus;
      } catch {
        // not listening yet
      }
    }
    if (Date.now() > deadline) {
      await bus.stop();
      throw new Error(`storybus dev was not ready within 90 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
