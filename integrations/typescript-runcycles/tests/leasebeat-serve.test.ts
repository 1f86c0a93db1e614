/**
 * runcycles (TypeScript, patched with leasebeat) through its public API
 * against `leasebeat serve`: a `withCycles`-guarded function (and a
 * `reserveForStream` stream) runs twice as long as its lease while the
 * server loses an extension's response (`extend:1=drop`) or answers a 5xx
 * burst (`extend:1-2=503`). The lease survives (the commit is accepted),
 * the retry reuses the same idempotency key, and the server's log holds no
 * lapse. The server binary is $LEASEBEAT_BIN; it listens on 127.0.0.1,
 * port 0. Nothing asserts on wall time.
 *
 * Copied into the SDK's tests/ by integrations/typescript-runcycles/run.sh.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it, vi } from "vitest";

import {
  CyclesClient,
  CyclesConfig,
  getCyclesContext,
  reserveForStream,
  withCycles,
} from "../src/index.js";

const TTL = 6_000; // retry reserve at these timeouts: 2 x 1000 + 1000 ms
const WORK_MS = 12_000; // the guarded function outlives its lease twice
const FAULTS: Record<string, { flag: string; faulted: number }> = {
  drop: { flag: "extend:1=drop", faulted: 1 },
  "5xx": { flag: "extend:1-2=503", faulted: 2 },
};

interface Serve {
  url: string;
  logPath: string;
  proc: ChildProcess;
}

const started: Serve[] = [];
const dirs: string[] = [];

async function serve(...args: string[]): Promise<Serve> {
  const exe = process.env.LEASEBEAT_BIN;
  if (!exe) throw new Error("LEASEBEAT_BIN not set (run.sh builds leasebeat serve)");
  const dir = mkdtempSync(join(tmpdir(), "runcycles-serve-"));
  dirs.push(dir);
  const logPath = join(dir, "serve.log");
  const proc = spawn(exe, ["serve", "--bind", "127.0.0.1:0", "--log", logPath, ...args], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  const rl = createInterface({ input: proc.stdout! });
  const line: string = await new Promise((resolve, reject) => {
    rl.once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`leasebeat serve exited ${code}`)));
  });
  rl.close();
  expect(line.startsWith("listening on ")).toBe(true);
  const s = { url: line.slice("listening on ".length).trim(), logPath, proc };
  started.push(s);
  return s;
}

afterEach(() => {
  for (const s of started.splice(0)) s.proc.kill();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  vi.restoreAllMocks();
});

function config(url: string): CyclesConfig {
  return new CyclesConfig({
    baseUrl: url,
    apiKey: "test-key",
    tenant: "acme",
    connectTimeout: 200,
    readTimeout: 300, // whole-attempt budget 500 ms -> attempt_budget 1000 ms
    retryEnabled: false,
    journalEnabled: false,
  });
}

type Entry = Record<string, unknown>;

function serverLog(s: Serve): Entry[] {
  return readFileSync(s.logPath, "utf8")
    .split("\n")
    .filter((x) => x.trim() !== "")
    .map((x) => JSON.parse(x) as Entry);
}

function check(s: Serve, faulted: number): void {
  const log = serverLog(s);
  const detail = JSON.stringify(log).slice(0, 4000);
  const requests = log.filter((e) => e.event === "request");
  const creates = requests.filter((e) => e.endpoint === "create");
  const extendsLog = requests.filter((e) => e.endpoint === "extend");
  const commits = requests.filter((e) => e.endpoint === "commit");
  const lapses = log.filter((e) => e.event === "lapse");
  expect(creates, detail).toHaveLength(1);
  expect(lapses, `unreported lapse: ${detail}`).toEqual([]);
  expect(commits, `the lease did not survive: ${detail}`).toHaveLength(1);
  expect(commits[0].status, detail).toBe(200);
  const keys = extendsLog.map((e) => e.header_key);
  expect(keys.length, detail).toBeGreaterThanOrEqual(faulted + 1);
  // the faulted extension(s) and their same-key retry
  expect(new Set(keys.slice(0, faulted + 1)).size, `retry did not reuse the key: ${keys}`).toBe(1);
  // beats after the recovered one use fresh keys (one logical extension each)
  expect(new Set(keys).size, String(keys)).toBe(keys.length - faulted);
  // the create was adopted: the first extension is no immediate priming beat
  expect((extendsLog[0].t_ms as number) - (creates[0].t_ms as number), detail).toBeGreaterThanOrEqual(1000);
}

/**
 * The adapter logs every decision on Node's debug channel
 * (`NODE_DEBUG=runcycles`, set by run.sh), which writes to stderr.
 */
let warnings: string[] = [];

function captureDecisions(): string[] {
  expect(process.env.NODE_DEBUG ?? "", "run with NODE_DEBUG=runcycles").toMatch(/runcycles/);
  const lines: string[] = [];
  warnings = [];
  const write = process.stderr.write.bind(process.stderr);
  vi.spyOn(process.stderr, "write").mockImplementation(((chunk: unknown, ...rest: unknown[]) => {
    const text = String(chunk);
    if (text.includes("Heartbeat decision: ")) {
      lines.push(text);
      return true;
    }
    return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write);
  vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => {
    warnings.push(args.map(String).join(" "));
  });
  return lines;
}

function checkLogged(lines: string[]): void {
  expect(lines.length).toBeGreaterThan(0);
  for (const x of lines) {
    expect(x).toMatch(/id=rsv[-_]/);
    expect(x).toContain("disposition=");
  }
  // the faulted beat was retried with the same key
  expect(lines.some((x) => x.includes("disposition=retry"))).toBe(true);
  // the SDK's own warning line for it, and the lease stayed proven throughout
  expect(warnings.some((x) => x.includes("retrying with the same key")), String(warnings)).toBe(true);
  expect(warnings.filter((x) => x.includes("lease_in_jeopardy")), String(warnings)).toEqual([]);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(Object.keys(FAULTS))("leasebeat serve, fault %s", (fault) => {
  const { flag, faulted } = FAULTS[fault];

  it("a withCycles-guarded function outlives its lease", async () => {
    const s = await serve("--fault", flag);
    const lines = captureDecisions();
    const client = new CyclesClient(config(s.url));
    let seenExpires: number[] = [];
    const guarded = withCycles(
      { estimate: 100, actionKind: "llm.completion", actionName: "test", ttlMs: TTL, client },
      async () => {
        const ctx = getCyclesContext();
        for (let t = 0; t < WORK_MS; t += 1000) {
          await sleep(1000);
          if (ctx?.expiresAtMs !== undefined) seenExpires.push(ctx.expiresAtMs);
        }
        return "done";
      },
    );
    expect(await guarded()).toBe("done");
    check(s, faulted);
    checkLogged(lines);
    // the context's expiresAtMs followed the extensions
    seenExpires = [...new Set(seenExpires)];
    expect(seenExpires.length).toBeGreaterThan(1);
  }, 60_000);

  it("a reserveForStream stream outlives its lease", async () => {
    const s = await serve("--fault", flag);
    const lines = captureDecisions();
    const client = new CyclesClient(config(s.url));
    const handle = await reserveForStream({
      client,
      estimate: 100,
      actionKind: "llm.completion",
      actionName: "stream",
      ttlMs: TTL,
    });
    await sleep(WORK_MS);
    await handle.commit(80);
    check(s, faulted);
    checkLogged(lines);
  }, 60_000);
});
