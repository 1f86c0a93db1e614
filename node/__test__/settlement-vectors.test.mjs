// Replays every file in tests/vectors/settlement/ (discovered at run time)
// through the installed `leasebeat` package's `Settlement`. The directory is
// LEASEBEAT_VECTORS_DIR/settlement when set (scripts/test-node.sh sets it),
// else ../../tests/vectors/settlement next to this file in the repository.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

import { parseSettleScenario, replaySettlement, Mismatch, FormatError } from './settle-replay.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const base = resolve(process.env.LEASEBEAT_VECTORS_DIR ?? join(here, '..', '..', 'tests', 'vectors'))
const dir = join(base, 'settlement')
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort()

test(`the settlement vector directory ${dir} holds at least 40 scenarios`, () => {
  assert.ok(files.length >= 40, `only ${files.length} *.json in ${dir}`)
})

for (const file of files) {
  test(`settlement vector ${file}`, () => {
    const scenario = parseSettleScenario(readFileSync(join(dir, file), 'utf8'))
    assert.equal(scenario.id, file.replace(/\.json$/, ''))
    const emitted = replaySettlement(scenario)
    assert.equal(emitted.length, scenario.steps.length)
  })
}

// The harness itself: it must fail on a wrong expectation, not pass vacuously.
const WORKED = {
  id: 'worked',
  config: {
    reservation_id: 'r-1',
    commit: { actual: { unit: 'TOKENS', amount: 900 } },
    event: { subject: { tenant: 'acme' }, action: { kind: 'llm', name: 'x' } }
  },
  steps: [
    { at: 0, wall: 1785585600000, start: 'commit', expect: { next: 'persist', record: { mode: 'commit', not_before_ms: null } } },
    { at: 1, persisted: true, expect: { next: 'commit', at: 1, key: 1 } },
    { at: 1, send: 'commit' },
    { at: 1001, fail: 'reset', expect: { next: 'commit', at: 1501, key: 1, delay_ms: 500 } },
    { at: 1501, send: 'commit' },
    { at: 1530, recv: { status: 429, headers: { 'Retry-After': '3' } }, expect: { next: 'persist', not_before_ms: 1785585604530 } },
    { at: 1531, persisted: true, expect: { next: 'commit', at: 4530 } },
    { at: 4530, send: 'commit' },
    { at: 4560, recv: { status: 410 }, expect: { next: 'persist', mode: 'event', heartbeat: 'stop', record: { mode: 'event' } } },
    { at: 4561, persisted: true, expect: { next: 'event', at: 4561, attempt: 1, body: { idempotency_key: 'key-1', subject: { tenant: 'acme' }, action: { kind: 'llm', name: 'x' }, actual: { unit: 'TOKENS', amount: 900 }, metadata: { recovered_reservation_id: 'r-1', recovery_reason: 'commit_after_reservation_expired' } } } },
    { at: 4561, send: 'event' },
    { at: 4600, recv: { status: 201, body: { status: 'APPLIED', event_id: 'e-1' } }, expect: { next: 'done', outcome: 'applied', record: 'remove', class: 'success', status: 201 } }
  ]
}

function withExpect (step, expect) {
  const s = structuredClone(WORKED)
  s.steps[step].expect = expect
  return JSON.stringify(s)
}

test('the settlement replay passes the worked example and catches every wrong field', () => {
  assert.equal(replaySettlement(parseSettleScenario(JSON.stringify(WORKED))).length, WORKED.steps.length)
  const wrong = [
    [0, { next: 'commit' }, 'next'],
    [0, { record: { mode: 'event' } }, 'record.mode'],
    [1, { at: 2 }, 'at'],
    [1, { key: 2 }, 'key'],
    [3, { delay_ms: 1000 }, 'delay_ms'],
    [5, { not_before_ms: 1785585604531 }, 'not_before_ms'],
    [5, { record: { not_before_ms: null } }, 'record.not_before_ms'],
    [8, { heartbeat: null }, 'heartbeat'],
    [9, { body: { idempotency_key: 'key-2' } }, 'body'],
    [9, { warnings: ['persist_failed'] }, 'warnings'],
    [11, { outcome: 'committed' }, 'outcome'],
    [11, { record: 'keep' }, 'record'],
    [11, { code: 'NOT_FOUND' }, 'code'],
    [11, { error: 'invalid_argument' }, 'error']
  ]
  for (const [step, expect, field] of wrong) {
    assert.throws(() => replaySettlement(parseSettleScenario(withExpect(step, expect))), (e) => e instanceof Mismatch && e.field === field, JSON.stringify(expect))
  }
})

test('the settlement replay checks the rules itself (no send before the due time)', () => {
  const s = structuredClone(WORKED)
  s.steps[4].at = 1500 // one ms early
  for (const step of s.steps.slice(4)) delete step.expect
  assert.throws(() => replaySettlement(parseSettleScenario(JSON.stringify(s))), (e) => e instanceof Mismatch && e.field === 'send')
})

test('the settlement vector parser is strict', () => {
  assert.throws(() => parseSettleScenario('{"id":"x","config":{"reservation_id":"r"},"steps":[{"at":0,"strat":"commit"}]}'), FormatError)
  assert.throws(() => parseSettleScenario('{"id":"x","config":{"reservation_id":"r"},"steps":[{"at":0,"persisted":true}]}'), FormatError)
  assert.throws(() => parseSettleScenario('{"id":"x","config":{"reservation_id":"r","colour":1},"steps":[]}'), FormatError)
})
