// The fast path (fast.js: decisions and attempts written by the addon into a
// scratch buffer and built as object literals) returns exactly what the
// regular native methods return: same values, types, key order and
// prototypes, same errors, over every vector and a set of odd inputs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Heartbeat } from 'leasebeat'

const here = dirname(fileURLToPath(import.meta.url))
const dir = resolve(process.env.LEASEBEAT_VECTORS_DIR ?? join(here, '..', '..', 'tests', 'vectors'))

function dump (slow) {
  const env = { ...process.env, LEASEBEAT_INTERNAL_SLOW_PATH: slow ? '1' : '0' }
  return execFileSync(process.execPath, [join(here, 'fast-dump.mjs'), dir], { env, encoding: 'utf8', maxBuffer: 1 << 28 })
}

test('the fast path is installed and hides its native helpers', () => {
  const proto = Heartbeat.prototype
  assert.doesNotMatch(Function.prototype.toString.call(proto.handleResponse), /native code/)
  assert.doesNotMatch(Function.prototype.toString.call(proto.pollAction), /native code/)
  for (const k of Object.getOwnPropertyNames(proto)) assert.ok(!k.startsWith('__'), k)
})

test('fast and regular paths return the same objects and errors', () => {
  const fast = dump(false).split('\n')
  const slow = dump(true).split('\n')
  assert.ok(fast.length > 1000, `only ${fast.length} lines`)
  assert.ok(!fast.some((l) => l.startsWith('replay failed')), fast.find((l) => l.startsWith('replay failed')))
  for (let i = 0; i < Math.max(fast.length, slow.length); i++) {
    assert.equal(fast[i], slow[i], `line ${i + 1} differs`)
  }
})
