// Replays every file in tests/vectors/ (discovered at run time) through the installed `leasebeat` package. The directory is LEASEBEAT_VECTORS_DIR when
// set (scripts/test-node.sh sets it, since the tests run from a temporary
// project), else ../../tests/vectors next to this file in the repository.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

import { parseScenario, replay, Mismatch, FormatError, msToNs } from './replay.mjs'
import { parse } from 'lossless-json'

const here = dirname(fileURLToPath(import.meta.url))
const dir = resolve(process.env.LEASEBEAT_VECTORS_DIR ?? join(here, '..', '..', 'tests', 'vectors'))
const listJson = (d) => readdirSync(d).filter((f) => f.endsWith('.json')).sort().map((f) => join(d, f))
const paths = listJson(dir)
const files = paths.map((p) => p.slice(dir.length + 1))

test(`the vector directory ${dir} holds scenario files`, () => {
  assert.ok(files.length > 0, `no *.json in ${dir}`)
})

for (const file of files) {
  test(`vector ${file}`, () => {
    const scenario = parseScenario(readFileSync(join(dir, file), 'utf8'))
    const decisions = replay(scenario)
    const expected = scenario.steps.filter((s) => s.event.type !== 'send').length
    assert.equal(decisions.length, expected)
  })
}

// The harness itself: it must fail on a wrong expectation, not pass vacuously.
const WORKED = {
  id: 'worked',
  config: { ttl_ms: 60000, request_timeout_ms: 10000 },
  steps: [
    { at: 0, send: 'create' },
    {
      at: 1500,
      recv: {
        status: 200,
        headers: {},
        body: { decision: 'ALLOW', reservation_id: 'r-1', affected_scopes: ['tenant:acme'], expires_at_ms: 1785585660000, remaining_ttl_ms: 61500 }
      },
      expect: { next: 'extend', at: 38500, key: 'new', numbers: { lead_floor: 60000, retry_reserve: 23000, next_delay: 37000 } }
    },
    { at: 38500, send: 'extend' },
    { at: 38600, fail: 'timeout', expect: { next: 'extend', key: 'same' } }
  ]
}

function withExpect (step, expect) {
  const s = structuredClone(WORKED)
  s.steps[step].expect = expect
  return JSON.stringify(s)
}

test('the replay passes the worked example and catches every wrong field', () => {
  assert.equal(replay(parseScenario(JSON.stringify(WORKED))).length, 2)
  const wrong = [
    [1, { next: 'stop' }, 'next'],
    [1, { at: 38501 }, 'at'],
    [1, { at: 'inf' }, 'at'],
    [1, { key: 'same' }, 'key'],
    [1, { key_index: 3 }, 'key_index'],
    [1, { mode: 'fallback' }, 'mode'],
    [1, { reason: 'cancelled' }, 'reason'],
    [1, { numbers: { next_delay: 36999 } }, 'numbers.next_delay'],
    [1, { numbers: { retry_window: 0 } }, 'numbers.retry_window'],
    [1, { warnings: ['extension_budget_depleting'] }, 'warnings'],
    [1, { step: 2 }, 'step'],
    [1, { id: 'other' }, 'id'],
    [3, { key: 'new' }, 'key']
  ]
  for (const [step, expect, field] of wrong) {
    assert.throws(() => replay(parseScenario(withExpect(step, expect))), (e) => e instanceof Mismatch && e.field === field, JSON.stringify(expect))
  }
})

test('the vector parser is exact and strict', () => {
  assert.equal(msToNs(parse('38500.001')), 38_500_001_000n)
  assert.equal(msToNs(parse('12345678901234')), 12_345_678_901_234_000_000n)
  assert.equal(msToNs(parse('0.0015')), 2000n)
  assert.throws(() => parseScenario('{"id":"x","config":{},"steps":[{"at":0,"sned":"create"}]}'), FormatError)
  assert.throws(() => parseScenario('{"id":"x","config":{"ttl_ms":1.5},"steps":[]}'), FormatError)
  const big = parseScenario('{"id":"x","config":{"ttl_ms":60000,"request_timeout_ms":18446744073709551615},"steps":[]}')
  assert.equal(big.config.requestTimeoutMs, 18446744073709551615n)
})
