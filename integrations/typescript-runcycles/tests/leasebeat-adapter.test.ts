/**
 * Unit tests of the adapter's own loop (src/leasebeat.ts): what the SDK's
 * suite cannot see. Fake timers drive it, as in the SDK's own tests.
 * Copied into the SDK's tests/ by integrations/typescript-runcycles/run.sh.
 */
import { afterEach, describe, expect, it, vi } from "vitest";

import { CyclesConfig } from "../src/config.js";
import { startLeaseHeartbeat } from "../src/leasebeat.js";
import { CyclesResponse } from "../src/response.js";

// connectTimeout + readTimeout = 7000 ms: attempt budget 7000, margin 1000,
// retry reserve 15000 (contract HB-21).
const config = new CyclesConfig({ baseUrl: "http://127.0.0.1:1", apiKey: "k", connectTimeout: 2000, readTimeout: 5000 });

function created(remaining: number): CyclesResponse {
  return CyclesResponse.success(200, {
    decision: "ALLOW",
    reservation_id: "rsv-1",
    affected_scopes: ["tenant:acme"],
    expires_at_ms: 1_000_000 + remaining,
    remaining_ttl_ms: remaining,
  });
}

function extended(remaining: number): CyclesResponse {
  return CyclesResponse.success(200, { status: "ACTIVE", expires_at_ms: 2_000_000, remaining_ttl_ms: remaining });
}

const createBody = { idempotency_key: "create-key", ttl_ms: 60000 };

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe("startLeaseHeartbeat", () => {
  it("adopts the create (first beat at lead_floor - retry_reserve), abandons an unanswered attempt at the client's bound, retries it with the same key", async () => {
    vi.useFakeTimers();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const calls: Array<{ at: number; body: Record<string, unknown> }> = [];
    const extendReservation = vi.fn((_id: string, body: Record<string, unknown>) => {
      calls.push({ at: performance.now(), body });
      // the first attempt never answers; the retry succeeds
      return calls.length === 1 ? new Promise<CyclesResponse>(() => {}) : Promise.resolve(extended(60000));
    });
    const client = { config, extendReservation } as any;
    const t0 = performance.now();
    let expires: number | undefined;
    const hb = startLeaseHeartbeat({
      client,
      reservationId: "rsv-1",
      ttlMs: 60000,
      create: { key: "create-key", requestBody: createBody, sentMono: t0, receivedMono: t0, response: created(60000) },
      onExpiresAt: (ms) => {
        expires = ms;
      },
    })!;
    expect(hb).toBeDefined();
    await vi.advanceTimersByTimeAsync(44_999);
    expect(calls).toHaveLength(0); // no priming extension: the create was adopted
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(1);
    expect(calls[0].at - t0).toBe(45_000);
    expect(calls[0].body.extend_by_ms).toBe(60000);
    // The runner abandons the attempt at its deadline (45000 + 7000, fired
    // early by its detection slack) and observes a timeout; the retry
    // window is then about 0 (lead ~8000 = budget 7000 + margin 1000), so
    // the same-key retry goes at once.
    await vi.advanceTimersByTimeAsync(6_000);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1_100);
    expect(calls).toHaveLength(2);
    expect(calls[1].at - t0).toBeGreaterThan(51_000);
    expect(calls[1].at - t0).toBeLessThanOrEqual(52_001);
    expect(calls[1].body).toEqual(calls[0].body); // same key, same body
    expect(warn).toHaveBeenCalledWith(expect.stringContaining("Heartbeat extend transport error; retrying with the same key"));
    expect(expires).toBe(2_000_000); // ctx.expiresAtMs follows each success
    hb.stop();
    hb.stop(); // twice is harmless
    await vi.advanceTimersByTimeAsync(120_000);
    expect(calls).toHaveLength(2);
  });

  it("logs lease_in_jeopardy (the runner's D-15 events) with the reservation id", async () => {
    vi.useFakeTimers();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    // the beat goes out and gets no answer: no newer success proves the lease
    const extendReservation = vi.fn(() => new Promise<CyclesResponse>(() => {}));
    const client = { config, extendReservation } as any;
    await vi.advanceTimersByTimeAsync(100_000);
    const now = performance.now();
    // A create received 25 s ago with 20 s remaining: its first beat was due
    // 20 s ago and its proven lead ended 5 s ago (an event loop that
    // stalled, as far as the heartbeat can tell).
    const hb = startLeaseHeartbeat({
      client,
      reservationId: "rsv-1",
      ttlMs: 60000,
      create: { key: "create-key", requestBody: createBody, sentMono: now - 25_000, receivedMono: now - 25_000, response: created(20_000) },
    })!;
    await vi.advanceTimersByTimeAsync(10);
    expect(extendReservation).toHaveBeenCalledTimes(1);
    const jeopardy = warn.mock.calls.map((c) => String(c[0])).filter((x) => x.includes("lease_in_jeopardy"));
    // the beat went out 20 s after its due time, past the proven lead
    expect(jeopardy.some((x) => x.includes("cause=late_beat"))).toBe(true);
    expect(jeopardy.some((x) => x.includes("cause=proven_until_reached"))).toBe(true);
    for (const x of jeopardy) expect(x).toContain("id=rsv-1");
    hb.stop();
  });

  it("does not start on a configuration leasebeat refuses, and says why", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const client = { config, extendReservation: vi.fn() } as any;
    const t0 = performance.now();
    const hb = startLeaseHeartbeat({
      client,
      reservationId: "rsv-1",
      ttlMs: 500, // below leasebeat's minimum ttl (1000 ms)
      create: { key: "create-key", requestBody: createBody, sentMono: t0, receivedMono: t0, response: created(60000) },
    });
    expect(hb).toBeUndefined();
    expect(warn).toHaveBeenCalledWith(expect.stringContaining("Heartbeat not started"));
  });
});
