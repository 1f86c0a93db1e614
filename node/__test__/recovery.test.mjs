// The 12 scenarios of the Cycles SDK Recovery Conformance Profile 0.3
// (client-recovery/scenarios.yaml) for the Node runner (startLease, Settler,
// Journal), each performed against `leasebeat serve` with the faults it
// needs and asserted FROM THE SERVER'S REQUEST LOG: endpoints in order, the
// same key in header and body, `applied` at most once, the event body, no
// request before a persisted `not_before_ms`. Each test is named after its
// scenario id ("CR-CORE-001: ..."), so `node --test --test-name-pattern
// '^CR-CORE-001:'` runs exactly one (recovery/node/adapter does). A restart
// is a fresh `node` process (recovery-child.mjs) started after the previous
// one was killed with SIGKILL, working from the journal alone; the catalog's
// assertion labels are named in the assertion messages.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'

import { Heartbeat, startLease, Journal } from 'leasebeat'
import { startServer, API_KEY } from './serve.mjs'

const CHILD = fileURLToPath(new URL('./recovery-child.mjs', import.meta.url))
const CREATE = {
  subject: { tenant: 'acme', workspace: 'recovery' },
  action: { kind: 'llm.completion', name: 'recovery-test' },
  estimate: { unit: 'TOKENS', amount: 1000 }
}
const ACTUAL = { unit: 'TOKENS', amount: 420 }
const METRICS = { tokens_input: 300, tokens_output: 120 }
const METADATA = { run: 'recovery' }
const sha = (s) => createHash('sha256').update(s, 'utf8').digest('hex')

function tempDir (t) {
  const d = mkdtempSync(join(tmpdir(), 'leasebeat-node-recovery-'))
  t.after(() => rmSync(d, { recursive: true, force: true }))
  return d
}

async function server (t, flags, opts) {
  const s = await startServer(flags, opts)
  t.after(() => s.close())
  return s
}

/** A child worker (recovery-child.mjs) with `cfg`; its stdout lines parsed. */
function spawnChild (t, cfg) {
  const child = spawn(process.execPath, [CHILD], {
    env: { ...process.env, LB_CHILD: JSON.stringify(cfg) },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const lines = []
  let stderr = ''
  child.stderr.on('data', (b) => { stderr += b })
  createInterface({ input: child.stdout }).on('line', (l) => lines.push(JSON.parse(l)))
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  t.after(() => child.kill('SIGKILL'))
  return {
    child,
    lines,
    exited,
    stderr: () => stderr,
    async until (pred, ms = 20000) {
      const end = performance.now() + ms
      for (;;) {
        const hit = lines.find(pred)
        if (hit !== undefined) return hit
        if (child.exitCode !== null || child.signalCode !== null) {
          await new Promise((resolve) => setTimeout(resolve, 50))
          const late = lines.find(pred)
          if (late !== undefined) return late
          throw new Error(`the child exited (${child.exitCode ?? child.signalCode}) before the expected line; stderr: ${stderr}`)
        }
        if (performance.now() > end) throw new Error(`the child never printed the expected line; lines: ${JSON.stringify(lines).slice(0, 2000)}; stderr: ${stderr}`)
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    },
    /** Resolves once the child exited with code 0. */
    async ok () {
      const r = await exited
      assert.equal(r.code, 0, `the child failed (${r.code ?? r.signal}): ${stderr}`)
    }
  }
}

/** Settlement requests (commit, events, release) in arrival order. */
function settleLog (s) {
  return s.requests().filter((e) => ['commit', 'events', 'event', 'release'].includes(e.endpoint)).sort((a, b) => a.seq - b.seq)
}

function endpoints (entries) {
  return entries.map((e) => (e.endpoint === 'event' ? 'events' : e.endpoint))
}

/** Every request carries the same key in its header and its body. */
function keysMatch (entries) {
  for (const e of entries) assert.equal(JSON.parse(e.body).idempotency_key, e.header_key, `header and body keys differ: ${JSON.stringify(e)}`)
}

/** settlement_occurs_at_most_once: at most one request changed the ledger. */
function atMostOnce (entries, label = 'settlement_occurs_at_most_once') {
  const applied = entries.filter((e) => e.applied === true)
  assert.ok(applied.length <= 1, `${label}: ${applied.length} requests applied`)
  return applied.length
}

/** The record files of a journal base directory (every partition). */
function recordFiles (dir) {
  if (!existsSync(dir)) return []
  const out = []
  for (const p of readdirSync(dir)) {
    for (const f of readdirSync(join(dir, p))) if (f.endsWith('.json')) out.push(join(dir, p, f))
  }
  return out
}

/** A lease in this process: started, created, with the journal in `dir`. */
async function lease (t, s, dir, extra = {}) {
  const hb = new Heartbeat({ ttlMs: extra.ttlMs ?? 3000, requestTimeoutMs: 1000, createRequest: CREATE })
  const events = []
  const settleDecisions = []
  const l = startLease(hb, {
    baseUrl: s.url,
    apiKey: API_KEY,
    journal: { dir },
    onHeartbeatFailure: (e) => events.push(e),
    onSettlementDecision: (d) => settleDecisions.push(d),
    ...extra.options
  })
  t.after(() => l.stop())
  const id = await l.ready
  return { l, id, events, settleDecisions }
}

test('CR-CORE-001: lost commit response reuses the same key', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=drop'])
  const { l, id } = await lease(t, s, dir)
  const r = await l.commit(ACTUAL, { metrics: METRICS, metadata: METADATA })
  assert.equal(r.outcome, 'committed')
  assert.equal(r.recordKept, false)
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'commit'], 'expected_requests: commit, commit_same_key')
  assert.equal(log[0].outcome, 'dropped')
  assert.equal(log[1].header_key, log[0].header_key, 'retry_uses_original_idempotency_key')
  assert.equal(log[0].header_key, r.key)
  assert.ok(log.every((e) => e.reservation_id === id))
  keysMatch(log)
  assert.equal(atMostOnce(log), log.some((e) => 'applied' in e) ? 1 : 0, 'settlement_occurs_at_most_once')
  if (log.some((e) => 'applied' in e)) assert.equal(log[1].applied, false, 'the same-key retry is a replay')
  assert.deepEqual(recordFiles(dir), [], 'the terminal record is removed')
})

test('CR-CORE-002: expired commit falls back to an event', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=410:RESERVATION_EXPIRED'])
  const { l } = await lease(t, s, dir)
  const r = await l.commit(ACTUAL, { metrics: METRICS, metadata: METADATA })
  assert.equal(r.outcome, 'applied')
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'events'], 'expected_requests: commit, event_same_key')
  assert.equal(log[1].header_key, log[0].header_key, 'event_same_key')
  keysMatch(log)
  const ev = JSON.parse(log[1].body)
  // event_carries_original_subject_action_actual
  assert.deepEqual(ev.subject, CREATE.subject, 'event_carries_original_subject_action_actual: subject')
  assert.deepEqual(ev.action, CREATE.action, 'event_carries_original_subject_action_actual: action')
  assert.deepEqual(ev.actual, ACTUAL, 'event_carries_original_subject_action_actual: actual')
  assert.deepEqual(ev.metrics, METRICS)
  for (const [k, v] of Object.entries(METADATA)) assert.equal(ev.metadata[k], v)
  assert.equal(log[1].status, 201)
  atMostOnce(log, 'settlement_occurs_at_most_once')
  assert.ok(!log.some((e) => e.endpoint === 'commit' && e.applied === true), 'the refused commit applied nothing')
  assert.deepEqual(recordFiles(dir), [])
})

test('CR-CORE-003: heartbeat transport failure is observable and non-fatal', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'extend:1=drop-before'])
  const { l, id, events } = await lease(t, s, dir, { ttlMs: 5000 })
  // The guarded action runs until the failed extension was retried and succeeded.
  let workDone = false
  const work = (async (signal) => {
    await s.until((srv) => srv.requests('extend').filter((e) => e.outcome === 'responded').length >= 1, 15000).catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(s.log())} ${JSON.stringify(events, (k, v) => (typeof v === 'bigint' ? String(v) : v))}`)
    })
    workDone = !signal.aborted
  })(l.signal)
  await work
  assert.ok(workDone, 'guarded_action_continues_under_warn_policy: the work was not cancelled')
  assert.equal(l.signal.aborted, false)
  const r = await l.commit(ACTUAL)
  assert.equal(r.outcome, 'committed', 'final_settlement_is_attempted')
  // heartbeat_failure_reports_reservation_and_disposition
  assert.ok(events.length >= 1, 'heartbeat_failure_reports_reservation_and_disposition: a failure was reported')
  assert.equal(events[0].reservationId, id, 'heartbeat_failure_reports_reservation_and_disposition: the reservation id')
  assert.equal(events[0].disposition, 'retry_same_key', 'heartbeat_failure_reports_reservation_and_disposition: the disposition')
  assert.equal(events[0].outcome, 'transport_failure')
  const ext = s.requests('extend').sort((a, b) => a.seq - b.seq)
  assert.equal(ext[0].outcome, 'dropped')
  assert.equal(ext[1].header_key, ext[0].header_key, 'expected_requests: extend, extend_same_key')
  const all = s.requests().filter((e) => e.endpoint !== 'create').sort((a, b) => a.seq - b.seq)
  assert.deepEqual(endpoints(all).slice(0, 2), ['extend', 'extend'])
  assert.equal(endpoints(all).at(-1), 'commit', 'final_settlement_is_attempted: the commit comes last')
  keysMatch(s.requests())
})

test('CR-CORE-004: protocol-invalid settlement success remains ambiguous', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=malformed'])
  const { l } = await lease(t, s, dir)
  const r = await l.commit(ACTUAL)
  assert.equal(r.outcome, 'committed')
  const classes = r.decisions.map((d) => d.class)
  assert.ok(classes.includes('ambiguous'), `only_schema_valid_expected_status_is_terminal_success: the truncated 2xx is ambiguous (${classes})`)
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'commit'], 'expected_requests: commit, commit_same_key')
  assert.equal(log[0].status, 200)
  assert.equal(log[1].header_key, log[0].header_key, 'ambiguous_success_retains_original_idempotency_key')
  keysMatch(log)
  atMostOnce(log)
  assert.deepEqual(recordFiles(dir), [])
})

test('CR-DURABLE-001: first commit is journaled before it leaves the process', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=hold=1500'])
  const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: API_KEY, dir, createRequest: CREATE, actual: ACTUAL, killOn: { class: 'sent', afterMs: 300 } })
  const sent = await a.until((l) => l.type === 'decision' && l.decision.class === 'sent')
  // journal_write_precedes_first_settlement_request: the record is on disk when the attempt goes.
  const classes = a.lines.filter((l) => l.type === 'decision').map((l) => l.decision.class)
  assert.deepEqual(classes.slice(0, 2), ['persisted', 'sent'], 'journal_write_precedes_first_settlement_request')
  const files = recordFiles(dir)
  assert.equal(files.length, 1, 'journal_write_precedes_first_settlement_request: the record exists')
  const key = JSON.parse(readFileSync(files[0], 'utf8')).commit_body.idempotency_key
  const killed = await a.exited
  assert.equal(killed.signal, 'SIGKILL', 'process_terminated_while_first_commit_is_in_flight')
  assert.equal(recordFiles(dir).length, 1, 'unresolved_record_survives_restart')
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir })
  const rep = await b.until((l) => l.type === 'replay')
  await b.ok()
  assert.equal(rep.report.settled.length, 1)
  assert.equal(rep.report.settled[0].outcome, 'committed')
  assert.equal(rep.report.settled[0].key, key)
  await s.until((srv) => srv.requests('commit').length >= 2)
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'commit'], 'expected_requests: commit, commit_same_key_after_restart')
  assert.ok(log.every((e) => e.header_key === key), 'commit_same_key_after_restart')
  keysMatch(log)
  assert.ok(sent !== undefined)
  atMostOnce(log)
  assert.deepEqual(recordFiles(dir), [], 'successful_replay_removes_record')
})

test('CR-DURABLE-002: replayed expired commit switches durably to event mode', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=drop-before', '--fault', 'commit:2=410:RESERVATION_EXPIRED'])
  // journal_contains_commit: a worker journaled the commit and died after its first (lost) attempt.
  const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: API_KEY, dir, createRequest: CREATE, actual: ACTUAL, metrics: METRICS, killOn: { class: 'transport' } })
  assert.equal((await a.exited).signal, 'SIGKILL')
  const key = JSON.parse(readFileSync(recordFiles(dir)[0], 'utf8')).commit_body.idempotency_key
  const before = settleLog(s).length
  // process_restarted; commit_reservation_expired; process_terminated_after_mode_switch
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir, killOn: { class: 'persisted', mode: 'event' } })
  assert.equal((await b.exited).signal, 'SIGKILL')
  const persisted = b.lines.filter((l) => l.type === 'decision').map((l) => [l.decision.class, l.decision.mode])
  assert.deepEqual(persisted.at(-1), ['persisted', 'event'])
  const rec = JSON.parse(readFileSync(recordFiles(dir)[0], 'utf8'))
  assert.equal(rec.mode, 'event', 'event_mode_is_persisted_before_event_attempt')
  assert.ok(!settleLog(s).some((e) => e.endpoint === 'events' || e.endpoint === 'event'), 'event_mode_is_persisted_before_event_attempt: no event sent yet')
  // process_restarted: the third process finds the event-mode record.
  const c = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir })
  const rep = await c.until((l) => l.type === 'replay')
  await c.ok()
  assert.equal(rep.report.settled[0].outcome, 'applied')
  const log = settleLog(s).slice(before)
  assert.deepEqual(endpoints(log), ['commit', 'events'], 'expected_requests: commit_same_key_after_restart, event_same_key_after_restart')
  assert.ok(log.every((e) => e.header_key === key), 'the same key after each restart')
  keysMatch(settleLog(s))
  const ev = JSON.parse(log[1].body)
  assert.deepEqual([ev.subject, ev.action, ev.actual, ev.metrics], [CREATE.subject, CREATE.action, ACTUAL, METRICS])
  atMostOnce(settleLog(s))
  assert.deepEqual(recordFiles(dir), [], 'successful_event_removes_record')
})

test('CR-DURABLE-003: rate-limit floor survives restart', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=429,retry-after=1'], { wallClock: true })
  // commit_429_with_retry_after; process_terminated_after_journal_write (the floor persisted)
  const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: API_KEY, dir, createRequest: CREATE, actual: ACTUAL, killOn: { class: 'persisted', attempt: 2 } })
  const r = await a.exited
  assert.equal(r.signal, 'SIGKILL', JSON.stringify(a.lines) + a.stderr())
  const rec = JSON.parse(readFileSync(recordFiles(dir)[0], 'utf8'))
  assert.equal(typeof rec.not_before_ms, 'number', 'the Retry-After floor is persisted')
  // process_restarted_before_retry_after
  assert.ok(Date.now() < rec.not_before_ms, 'the restart happens before the floor')
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir })
  const rep = await b.until((l) => l.type === 'replay')
  await b.ok()
  assert.equal(rep.report.settled[0].outcome, 'committed')
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'commit'], 'expected_requests: commit, commit_same_key_after_retry_after')
  assert.equal(log[1].header_key, log[0].header_key)
  // The server's clock lags the wall clock by at most clockLagMs.
  assert.ok(log[1].arrived_ms + s.clockLagMs >= rec.not_before_ms, `no_retry_before_persisted_not_before: arrived ${log[1].arrived_ms} (+${s.clockLagMs}) < ${rec.not_before_ms}`)
  keysMatch(log)
  atMostOnce(log)
  assert.deepEqual(recordFiles(dir), [], 'successful_replay_removes_record')
})

test('CR-DURABLE-004: tenant journal survives API-key rotation', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=drop-before'], { anyKey: true })
  const OLD = 'old-api-key-7f3a9c'
  const NEW = 'new-api-key-b21d04'
  const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: OLD, tenant: 'acme', dir, createRequest: CREATE, actual: ACTUAL, killOn: { class: 'transport' } })
  assert.equal((await a.exited).signal, 'SIGKILL')
  const key = JSON.parse(readFileSync(recordFiles(dir)[0], 'utf8')).commit_body.idempotency_key
  // api_key_rotated; process_restarted
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: NEW, tenant: 'acme', dir })
  const rep = await b.until((l) => l.type === 'replay')
  await b.ok()
  assert.equal(rep.report.settled.length, 1, 'new_tenant_credential_finds_record')
  assert.equal(rep.report.settled[0].outcome, 'committed')
  const log = settleLog(s)
  assert.deepEqual(endpoints(log), ['commit', 'commit'], 'expected_requests: commit_same_key_after_restart')
  assert.equal(log[1].header_key, key)
  keysMatch(log)
  atMostOnce(log)
  // old_api_key_is_not_stored: in no journal file (records, locks, names).
  const walk = (d) => readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? [e.name, ...walk(join(d, e.name))] : [e.name, readFileSync(join(d, e.name), 'utf8')]))
  for (const text of walk(dir)) assert.ok(!text.includes(OLD) && !text.includes(NEW), 'old_api_key_is_not_stored')
})

test('CR-DURABLE-005: corrupt or unsupported journal record is quarantined', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1-3=drop-before'])
  // Three journaled commits from three workers that died after their first lost attempt.
  const keys = []
  for (let i = 0; i < 3; i++) {
    const before = new Set(recordFiles(dir))
    const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: API_KEY, dir, createRequest: CREATE, actual: ACTUAL, noReplay: true, killOn: { class: 'transport' } })
    assert.equal((await a.exited).signal, 'SIGKILL', a.stderr())
    keys.push(recordFiles(dir).find((f) => !before.has(f)))
  }
  const [corrupt, unsupported, valid] = keys
  writeFileSync(corrupt, readFileSync(corrupt).subarray(0, 50))
  const u = JSON.parse(readFileSync(unsupported, 'utf8'))
  u.version = 2
  writeFileSync(unsupported, JSON.stringify(u))
  const validId = JSON.parse(readFileSync(valid, 'utf8')).reservation_id
  const before = settleLog(s).length
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir })
  const rep = await b.until((l) => l.type === 'replay')
  await b.ok()
  const q = rep.report.quarantined.map((x) => x.file).sort()
  assert.ok(q.includes(corrupt.split('/').pop()), 'corrupt_record_is_quarantined')
  assert.ok(q.includes(unsupported.split('/').pop()), 'unsupported_record_version_is_quarantined')
  assert.ok(rep.report.quarantined.every((x) => x.reason.length > 0), 'corruption_is_reported')
  assert.ok(!existsSync(corrupt) && !existsSync(unsupported))
  const aside = readdirSync(join(corrupt, '..')).filter((f) => f.endsWith('.corrupt'))
  assert.equal(aside.length, 2, 'renamed aside, never deleted')
  assert.deepEqual(rep.report.settled.map((x) => [x.reservationId, x.outcome]), [[validId, 'committed']], 'other_valid_records_still_replay')
  const log = settleLog(s).slice(before)
  assert.deepEqual(log.map((e) => e.reservation_id), [validId], 'only the valid record is sent')
  keysMatch(log)
})

test('CR-DURABLE-006: concurrent replay remains exactly once', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, ['--fault', 'commit:1=drop-before', '--fault', 'commit:2-=hold=300'])
  const a = spawnChild(t, { mode: 'lease', url: s.url, apiKey: API_KEY, dir, createRequest: CREATE, actual: ACTUAL, killOn: { class: 'transport' } })
  assert.equal((await a.exited).signal, 'SIGKILL')
  const key = JSON.parse(readFileSync(recordFiles(dir)[0], 'utf8')).commit_body.idempotency_key
  // two_independent_workers_replay_same_record: both wait for the barrier file, released at once.
  const barrier = join(tempDir(t), 'go')
  const w1 = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir, barrier })
  const w2 = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir, barrier })
  await w1.until((l) => l.type === 'waiting')
  await w2.until((l) => l.type === 'waiting')
  writeFileSync(barrier, '')
  const [r1, r2] = await Promise.all([w1.until((l) => l.type === 'replay'), w2.until((l) => l.type === 'replay')])
  await Promise.all([w1.ok(), w2.ok()])
  const settled = [...r1.report.settled, ...r2.report.settled]
  const busy = [...r1.report.busy, ...r2.report.busy]
  assert.ok(settled.length <= 1, `one worker settles it (settled ${settled.length}, busy ${busy.length})`)
  const log = settleLog(s).slice(1)
  assert.ok(log.length >= 1 && log.length <= 2, 'concurrent_commit_same_key')
  assert.ok(log.every((e) => e.header_key === key), 'concurrent_commit_same_key')
  keysMatch(log)
  assert.ok(settleLog(s).filter((e) => e.status === 200).length >= 1)
  atMostOnce(settleLog(s), 'settlement_occurs_at_most_once')
  assert.deepEqual(recordFiles(dir), [], 'terminal_record_is_removed')
})

test('CR-DURABLE-007: journal filenames preserve distinct arbitrary reservation identifiers', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, [])
  // Two ids whose legacy names collide ('a/b' and 'a?b' -> 'a_b.json'), journaled by a
  // worker with a dead server (nothing settles), then a legacy-named file of 'a/b'.
  const j = Journal.open({ dir, baseUrl: s.url, apiKey: API_KEY })
  const part = j.dir
  j.close()
  const rec = (id) => JSON.stringify({
    version: 1,
    reservation_id: id,
    base_url: s.url,
    mode: 'commit',
    commit_body: { actual: ACTUAL, idempotency_key: `key-${sha(id).slice(0, 12)}` },
    event_fallback_body: null,
    recorded_at_ms: Date.now(),
    not_before_ms: null
  })
  // legacy_record_encountered: the SDKs' old name for 'a/b', and a v2 record of 'a?b'.
  writeFileSync(join(part, 'a_b.json'), rec('a/b'), { mode: 0o600 })
  writeFileSync(join(part, `v2-${sha('a?b')}.json`), rec('a?b'), { mode: 0o600 })
  // A legacy name that is not its stored id's: left alone, never deleted.
  writeFileSync(join(part, 'x_y.json'), rec('a/b'), { mode: 0o600 })
  const b = spawnChild(t, { mode: 'replay', url: s.url, apiKey: API_KEY, dir })
  const rep = await b.until((l) => l.type === 'replay')
  await b.ok()
  assert.deepEqual(rep.report.migrated.map((m) => [m.from, m.to, m.reservationId]), [['a_b.json', `v2-${sha('a/b')}.json`, 'a/b']],
    'matching_legacy_record_migrates_without_deleting_collision')
  assert.ok(rep.report.skipped.some((x) => x.file === 'x_y.json'), 'a mismatched legacy file is reported, left alone')
  assert.ok(existsSync(join(part, 'x_y.json')), 'never deleted')
  // standard_filename_is_sha256_of_exact_utf8_identifier; distinct_identifiers_never_share_a_journal_file
  const ids = rep.report.settled.map((x) => x.reservationId).sort()
  assert.deepEqual(ids, ['a/b', 'a?b'], 'distinct_identifiers_never_share_a_journal_file: both replay')
  const keys = new Set(rep.report.settled.map((x) => x.key))
  assert.equal(keys.size, 2)
  // Each went to its own reservation path (the server does not know them: 404, rejected).
  const paths = settleLog(s).map((e) => e.path).sort()
  assert.deepEqual(paths, ['/v1/reservations/a%2Fb/commit', '/v1/reservations/a%3Fb/commit'])
  assert.equal(sha('a/b'), createHash('sha256').update(Buffer.from('a/b', 'utf8')).digest('hex'), 'standard_filename_is_sha256_of_exact_utf8_identifier')
})

test('CR-BOUNDARY-001: missing actual is surfaced without settlement', async (t) => {
  const dir = tempDir(t)
  const s = await server(t, [])
  const { l } = await lease(t, s, dir)
  // guarded_action_does_not_return_actual
  const r = await l.commit(undefined)
  assert.equal(r.outcome, 'no_actual', 'missing_actual_or_guarded_action_failure_is_surfaced')
  assert.equal(r.ok, false, 'missing_actual_or_guarded_action_failure_is_surfaced')
  await l.stop()
  assert.deepEqual(settleLog(s), [], 'no_commit_or_event_without_known_actual')
  assert.deepEqual(recordFiles(dir), [], 'nothing journaled without an actual')
})
