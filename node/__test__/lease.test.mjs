// startLease and Settler (the runner's settlement through the journal)
// against `leasebeat serve`: the heartbeat keeps running while a commit is in
// flight and stops with its final outcome (ST-11), release, the HP-1
// policies (warn, cancel through the lease's AbortSignal, fail_on_finalize),
// replay on start, a bounded flush, the journal opt-out and bad options.
// The 12 recovery scenarios are in recovery.test.mjs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { Heartbeat, HeartbeatFailureError, Journal, JournalError, Settlement, Settler, runHeartbeat, startLease } from 'leasebeat'
import { startServer, API_KEY } from './serve.mjs'

const CREATE = {
  subject: { tenant: 'acme' },
  action: { kind: 'llm.completion', name: 'lease-test' },
  estimate: { unit: 'TOKENS', amount: 1000 }
}
const ACTUAL = { unit: 'TOKENS', amount: 77 }

function tempDir (t) {
  const d = mkdtempSync(join(tmpdir(), 'leasebeat-node-lease-'))
  t.after(() => rmSync(d, { recursive: true, force: true }))
  return d
}

async function server (t, flags = []) {
  const s = await startServer(flags)
  t.after(() => s.close())
  return s
}

const hb = (ttlMs = 3000) => new Heartbeat({ ttlMs, requestTimeoutMs: 1000, createRequest: CREATE })

function records (dir) {
  if (!existsSync(dir)) return []
  return readdirSync(dir).flatMap((p) => readdirSync(join(dir, p)).filter((f) => f.endsWith('.json')))
}

test('commit: journaled, the heartbeat keeps beating while the commit is held, and stops with its outcome (ST-11)', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=hold=2500'])
  const decisions = []
  const l = startLease(hb(2000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir }, onDecision: (d) => decisions.push(d) })
  const id = await l.ready
  assert.equal(l.reservationId, id)
  const pending = l.commit(ACTUAL, { metrics: { tokens_input: 5 }, metadata: { a: 'b' } })
  await s.until(() => records(dir).length === 1)
  const extendsBefore = s.requests('extend').length
  const r = await pending
  assert.equal(r.outcome, 'committed')
  assert.equal(r.ok, true)
  assert.equal(r.recordKept, false)
  assert.equal(r.reservationId, id)
  assert.equal(r.lastDecision.stopHeartbeat, true)
  assert.deepEqual(r.decisions.map((d) => d.class), ['persisted', 'sent', 'success'])
  const stop = await l.stopped
  assert.equal(stop.reason, 'cancelled')
  const commit = s.requests('commit')[0]
  const ext = s.requests('extend')
  assert.ok(ext.length > extendsBefore || ext.some((e) => e.arrived_ms > commit.arrived_ms), 'an extension went while the commit was held')
  assert.ok(ext.every((e) => e.seq < commit.seq + 100))
  // serve logged the commit when its hold began, with the key it was answered for.
  const held = s.log().filter((e) => e.event === 'held' && e.endpoint === 'commit')
  assert.equal(held.length, 1)
  assert.equal(held[0].header_key, commit.header_key)
  assert.deepEqual(JSON.parse(commit.body).metrics, { tokens_input: 5 })
  assert.deepEqual(records(dir), [])
  assert.deepEqual(s.lapses(), [])
  await assert.rejects(l.commit(ACTUAL), /already being settled/)
})

test('release: one key, not journaled; the reason is sent', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'release:1=503'])
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  await l.ready
  const r = await l.release('nothing to do')
  assert.equal(r.outcome, 'released')
  const rel = s.requests('release')
  assert.equal(rel.length, 2)
  assert.equal(rel[0].header_key, rel[1].header_key)
  assert.equal(JSON.parse(rel[1].body).reason, 'nothing to do')
  assert.deepEqual(records(dir), [])
  await l.stopped
})

test('commit without an actual: no_actual, nothing sent, the lease still held (released after)', async (t) => {
  const dir = tempDir(t)
  const s = await server(t)
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  await l.ready
  const r = await l.commit(null)
  assert.equal(r.outcome, 'no_actual')
  assert.equal(r.ok, false)
  assert.equal(s.requests('commit').length, 0)
  const rel = await l.release()
  assert.equal(rel.outcome, 'released')
})

test('HP-1 warn (default): every heartbeat failure is reported with the reservation and disposition; the work goes on', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'extend:1=503'])
  const events = []
  const l = startLease(hb(4000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir }, onHeartbeatFailure: (e) => events.push(e) })
  const id = await l.ready
  await s.until((srv) => srv.requests('extend').length >= 2, 15000)
  assert.equal(l.signal.aborted, false)
  const r = await l.commit(ACTUAL)
  assert.equal(r.outcome, 'committed')
  assert.equal(events.length, 1)
  assert.equal(events[0].event, 'heartbeat_failure')
  assert.equal(events[0].reservationId, id)
  assert.equal(events[0].disposition, 'retry_same_key')
  assert.equal(events[0].policy, 'warn')
  assert.equal(events[0].outcome, 'server_error')
  assert.deepEqual(l.heartbeatFailures.map((e) => e.disposition), ['retry_same_key'])
})

test('HP-1 warn without a listener: the failure is a process warning', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'extend:1=503'])
  const warnings = []
  const onWarning = (w) => { if (w.name === 'LeasebeatHeartbeatWarning') warnings.push(w.message) }
  process.on('warning', onWarning)
  t.after(() => process.off('warning', onWarning))
  const l = startLease(hb(4000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  const id = await l.ready
  await s.until((srv) => srv.requests('extend').length >= 2, 15000)
  await l.commit(ACTUAL)
  await new Promise((resolve) => setImmediate(resolve))
  assert.ok(warnings.some((m) => m.includes(id) && m.includes('retry_same_key')), warnings.join('\n'))
})

test('HP-1 cancel: a heartbeat stop aborts the lease signal (reason: HeartbeatFailureError); the settlement still runs', async (t) => {
  const dir = tempDir(t)
  // Every extension refused for good: the heartbeat stops (not_found).
  const s = await server(t, ['--fault', 'extend:*=404:NOT_FOUND'])
  const events = []
  const l = startLease(hb(4000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir }, policy: 'cancel', onHeartbeatFailure: (e) => events.push(e) })
  const id = await l.ready
  const aborted = await new Promise((resolve) => l.signal.addEventListener('abort', () => resolve(l.signal.reason), { once: true }))
  assert.ok(aborted instanceof HeartbeatFailureError)
  assert.equal(aborted.code, 'ERR_LEASEBEAT_HEARTBEAT_FAILED')
  assert.equal(aborted.reservationId, id)
  assert.equal(events.at(-1).disposition, 'stop')
  const stop = await l.stopped
  assert.equal(stop.next, 'stop')
  // The work saw the abort; it still settles what it used (the server answers).
  const r = await l.commit(ACTUAL)
  assert.ok(['committed', 'rejected'].includes(r.outcome), r.outcome)
  assert.equal(s.requests('commit').length, 1)
})

test('HP-1 fail_on_finalize: the settlement runs, then commit rejects with the heartbeat failure', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'extend:1=503'])
  const l = startLease(hb(4000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir }, policy: 'fail_on_finalize', onHeartbeatFailure: () => {} })
  await l.ready
  await s.until((srv) => srv.requests('extend').length >= 2, 15000)
  assert.equal(l.signal.aborted, false, 'fail_on_finalize does not cancel the work')
  const err = await l.commit(ACTUAL).then(() => null, (e) => e)
  assert.ok(err instanceof HeartbeatFailureError)
  assert.equal(err.settlement.outcome, 'committed', 'the settlement ran first')
  assert.equal(err.failures[0].disposition, 'retry_same_key')
  assert.equal(s.requests('commit').length, 1)
  assert.deepEqual(records(dir), [])
})

test('Settler: replay on start settles what an earlier process left; flush is bounded and leaves the unresolved on disk (J-7)', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:2=hold=3000'])
  // An earlier "process": a record journaled, never sent.
  const j = Journal.open({ dir, baseUrl: s.url, apiKey: API_KEY })
  const left = new Settlement({ reservationId: 'left-behind', baseUrl: s.url, commit: { actual: ACTUAL } }, performance.now(), Date.now())
  j.persist(left, performance.now())
  j.close()
  const seen = []
  const settler = new Settler({ baseUrl: s.url, apiKey: API_KEY, journal: { dir }, onReplay: (r) => seen.push(r) })
  const rep = await settler.replayed
  assert.equal(rep.settled.length, 1)
  assert.equal(rep.settled[0].key, left.key)
  assert.equal(rep.settled[0].outcome, 'rejected', 'the server does not know it: 404, rejected, removed')
  assert.deepEqual(seen.length, 1)
  assert.deepEqual(records(dir), [])
  // A held commit: flush(200) returns with it pending, its record on disk.
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, settler })
  await l.ready
  const p = l.commit(ACTUAL)
  const t0 = performance.now()
  await s.until(() => records(dir).length === 1)
  const f = await settler.flush(200)
  assert.ok(performance.now() - t0 < 2500)
  assert.equal(f.pending, 1)
  assert.equal(records(dir).length, 1)
  const f2 = await settler.flush(10000)
  assert.equal(f2.pending, 0)
  assert.equal((await p).outcome, 'committed')
  assert.deepEqual(records(dir), [])
  settler.close()
  assert.throws(() => settler.release('x'), /closed/)
})

test('Settler.close: a settlement waiting for its retry stops where it is; its record stays for the next replay', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=429,retry-after=30'])
  const settler = new Settler({ baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, settler })
  await l.ready
  const p = l.commit(ACTUAL)
  await s.until((srv) => srv.requests('commit').length === 1)
  await new Promise((resolve) => setTimeout(resolve, 50))
  settler.close()
  const r = await p
  assert.equal(r.outcome, null, 'not ended')
  assert.equal(r.recordKept, true, 'its record stays on disk')
  assert.equal(records(dir).length, 1)
  const again = new Settler({ baseUrl: s.url, apiKey: API_KEY, journal: { dir }, replay: false })
  const replay = again.journal.replay({ now: performance.now(), wallMs: Date.now() })
  assert.equal(replay.settlements.length, 1, 'the claim was released')
  assert.equal(replay.settlements[0].key, r.key)
  again.journal.releaseClaim(r.reservationId)
  await l.stop()
})

test('SP-3: a journal write that fails still sends the commit (one key); nothing is reported kept', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=429,retry-after=30'])
  const settler = new Settler({ baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, settler })
  await l.ready
  // The partition becomes a plain file: every write fails from now on.
  const part = settler.journal.dir
  rmSync(part, { recursive: true, force: true })
  writeFileSync(part, 'not a directory')
  const p = l.commit(ACTUAL)
  await s.until((srv) => srv.requests('commit').length === 1)
  await new Promise((resolve) => setTimeout(resolve, 50))
  settler.close()
  const r = await p
  assert.equal(r.outcome, null, 'not ended')
  assert.equal(r.recordKept, false, 'nothing was written, nothing is kept')
  const failed = r.decisions.filter((d) => d.warnings.includes('persist_failed'))
  // Two record changes, both failed: created, then the 429's not_before_ms.
  assert.equal(failed.length, 2)
  for (const d of failed) assert.match(d.detail, /journal /)
  assert.equal(s.requests('commit')[0].header_key, r.key)
  assert.equal(readFileSync(part, 'utf8'), 'not a directory')
  await l.stop()
})

test('journal: false opts out (nothing written; the commit still goes)', async (t) => {
  const dir = tempDir(t)
  const s = await server(t)
  process.env.CYCLES_JOURNAL_DIR = join(dir, 'env')
  t.after(() => { delete process.env.CYCLES_JOURNAL_DIR })
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, journal: false })
  await l.ready
  assert.equal(l.settler.journal, null)
  const r = await l.commit(ACTUAL)
  assert.equal(r.outcome, 'committed')
  assert.equal(r.recordKept, false)
  assert.ok(!existsSync(join(dir, 'env')))
  // Default: CYCLES_JOURNAL_DIR.
  const l2 = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY })
  await l2.ready
  assert.ok(l2.settler.journal.dir.startsWith(join(dir, 'env')))
  await l2.release()
})

test('bad options: TypeErrors at once; a journal that cannot open is a JournalError', async (t) => {
  const dir = tempDir(t)
  assert.throws(() => startLease(hb(), { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', policy: 'ignore' }), TypeError)
  assert.throws(() => startLease(hb(), { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', nope: 1 }), TypeError)
  assert.throws(() => startLease(hb(), { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', settler: {} }), TypeError)
  assert.throws(() => startLease(hb(), { transport: async () => ({ status: 500 }) }), TypeError)
  assert.throws(() => new Settler({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', journal: 'dir' }), TypeError)
  assert.throws(() => new Settler({ apiKey: 'k' }), TypeError)
  assert.throws(() => new Settler({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', journal: { dir, extra: 1 } }), TypeError)
  assert.throws(() => new Settler({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', journal: { dir: '/proc/no/such' } }), (e) => e instanceof JournalError && typeof e.kind === 'string')
  const settler = new Settler({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', journal: { dir } })
  // A commit body the core refuses: typed, nothing journaled.
  assert.throws(() => settler.commit('r-1', { unit: 'TOKENS', amount: 2n ** 64n }), (e) => e instanceof RangeError)
  assert.throws(() => settler.commit('r-1', ACTUAL, { nope: 1 }), TypeError)
  assert.throws(() => settler.commit('a\0b', ACTUAL), (e) => e instanceof RangeError && e.code === 'ERR_LEASEBEAT_INVALID_CONFIG')
  assert.throws(() => settler.settle({}), TypeError)
  assert.deepEqual(records(dir), [])
  const s = await server(t)
  const l = startLease(hb(), { baseUrl: s.url, apiKey: API_KEY, journal: { dir } })
  await l.ready
  await assert.rejects(l.commit(ACTUAL, { bogus: 1 }), TypeError)
  await assert.rejects(l.commit({ unit: 'TOKENS', amount: -1 }), RangeError)
  const r = await l.commit(ACTUAL) // nothing was settled before: allowed
  assert.equal(r.outcome, 'committed')
})

test('runHeartbeat finalize: the commit after the stop goes through the Settlement and the journal (same-key retry)', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=drop'])
  const ac = new AbortController()
  const finals = []
  const stop = await runHeartbeat(hb(), {
    baseUrl: s.url,
    apiKey: API_KEY,
    signal: ac.signal,
    journal: { dir },
    finalize: { commit: { actual: ACTUAL } },
    onDecision: (d) => { if (d.outcome === 'success') ac.abort() },
    onFinalize: (r) => finals.push(r)
  })
  assert.equal(stop.reason, 'cancelled')
  assert.equal(finals.length, 1)
  assert.equal(finals[0].kind, 'commit')
  assert.equal(finals[0].outcome, 'committed')
  assert.equal(finals[0].status, 200)
  assert.equal(finals[0].error, null)
  const commits = s.requests('commit')
  assert.equal(commits.length, 2)
  assert.equal(commits[0].header_key, commits[1].header_key)
  assert.equal(commits[0].header_key, finals[0].key)
  assert.deepEqual(records(dir), [])
  await assert.rejects(runHeartbeat(hb(), { baseUrl: s.url, apiKey: API_KEY, journal: 'x' }), TypeError)
})

test('after a heartbeat stop `expired` the commit is still sent and its answer reported', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'extend:*=410:RESERVATION_EXPIRED'])
  const events = []
  const l = startLease(hb(3000), { baseUrl: s.url, apiKey: API_KEY, journal: { dir }, onHeartbeatFailure: (e) => events.push(e) })
  await l.ready
  const stop = await l.stopped
  assert.equal(stop.reason, 'expired')
  assert.equal(events.at(-1).disposition, 'stop')
  assert.equal(events.at(-1).reason, 'expired')
  assert.equal(l.signal.aborted, false, 'warn: the work is not cancelled')
  const r = await l.commit(ACTUAL)
  assert.equal(r.outcome, 'committed', 'the server (not expired in fact) answers the commit')
  assert.equal(s.requests('commit').length, 1)
})
