// The Journal API of the installed `leasebeat` package (J-1..J-8 through the
// core): round trip, a Retry-After floor across a restart, quarantine of a
// truncated or edited record, odd reservation ids, a symlinked directory, a
// directory that is not writable, a full disk, bad input types. Every test
// uses its own temporary directory.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync, execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync,
  symlinkSync, writeFileSync
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Journal, JournalError, Settlement } from 'leasebeat'

const BASE = 'http://127.0.0.1:1'
const KEY = 'test-key'
const COMMIT = { actual: { unit: 'TOKENS', amount: 900 } }
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0

function tempDir (t) {
  const d = mkdtempSync(join(tmpdir(), 'leasebeat-node-journal-'))
  t.after(() => rmSync(d, { recursive: true, force: true }))
  return d
}

function open (dir, extra = {}) {
  return Journal.open({ dir, baseUrl: BASE, apiKey: KEY, ...extra })
}

function commit (id = 'r-1', now = performance.now()) {
  return new Settlement({ reservationId: id, baseUrl: BASE, commit: COMMIT }, now, Date.now())
}

const sha = (s) => createHash('sha256').update(s, 'utf8').digest('hex')
const recordPath = (j, id) => join(j.dir, `v2-${sha(id)}.json`)
const journalErr = (kind) => (e) => e instanceof JournalError && e.code === 'ERR_LEASEBEAT_JOURNAL' && e.kind === kind

/** Sends the attempt the settlement asks for and answers it with `response`. */
function answer (s, response) {
  const a = s.pollAction()
  assert.equal(a.type, 'send')
  s.handleSent(a.attempt.id, performance.now())
  return s.handleResponse(a.attempt.id, response, performance.now(), Date.now())
}

const committed = (key) => ({
  status: 200,
  body: JSON.stringify({ status: 'COMMITTED', charged: { unit: 'TOKENS', amount: 900 } })
})

test('round trip: persist writes the record (0600, 0700 dir), a fresh journal replays it with the same key, finish removes it', (t) => {
  const dir = tempDir(t)
  const j = open(dir)
  assert.equal(typeof j.dir, 'string')
  assert.equal(j.baseUrl, BASE)
  assert.equal(statSync(j.dir).mode & 0o777, 0o700)
  const s = commit()
  const d = j.persist(s, performance.now())
  assert.equal(d.class, 'persisted')
  assert.equal(d.next, 'commit')
  const file = recordPath(j, 'r-1')
  assert.ok(existsSync(file), 'J-1: the record is on disk before the first request')
  assert.equal(statSync(file).mode & 0o777, 0o600)
  const stored = JSON.parse(readFileSync(file, 'utf8'))
  assert.equal(stored.reservation_id, 'r-1')
  assert.equal(stored.commit_body.idempotency_key, s.key)
  assert.deepEqual(j.scan().records.map((r) => [r.reservationId, r.mode, r.notBeforeMs]), [['r-1', 'commit', null]])
  // The live settlement holds the claim: another journal sees the record busy.
  const other = open(dir)
  const busy = other.replay({ now: performance.now(), wallMs: Date.now() })
  assert.deepEqual(busy.settlements, [])
  assert.deepEqual(busy.busy, ['r-1'])
  // Not finished: finish refuses and touches nothing.
  assert.throws(() => j.finish(s), journalErr('not_finished'))
  assert.ok(existsSync(file))
  // "Crash": this process drops its claim; a fresh journal replays the record alone.
  j.releaseClaim('r-1')
  const r = other.replay({ now: performance.now(), wallMs: Date.now(), retry: { maxAttempts: 3 } })
  assert.equal(r.settlements.length, 1)
  const replayed = r.settlements[0]
  assert.equal(replayed.reservationId, 'r-1')
  assert.equal(replayed.key, s.key, 'ST-1: the same key after a restart')
  const done = answer(replayed, committed())
  assert.equal(done.outcome, 'committed')
  assert.equal(done.record.type, 'remove')
  other.finish(replayed)
  assert.ok(!existsSync(file), 'J-5: a success removes the record')
  assert.deepEqual(other.scan().records, [])
  other.close()
  assert.equal(other.closed, true)
  assert.throws(() => other.scan(), (e) => e.code === 'ERR_LEASEBEAT_CLOSED')
})

test('a 429 floor survives a restart: the replayed settlement sends no earlier than the persisted notBeforeMs', (t) => {
  const dir = tempDir(t)
  const j = open(dir)
  const s = commit()
  j.persist(s, performance.now())
  const d = answer(s, { status: 429, headers: { 'retry-after': '30' }, body: '{"error":"LIMIT_EXCEEDED","message":"slow down","request_id":"q"}' })
  assert.equal(d.next, 'persist', 'ST-4: the floor is persisted before the retry')
  const wall = Date.now()
  const p = j.persist(s, performance.now())
  assert.equal(p.next, 'commit')
  const nb = JSON.parse(readFileSync(recordPath(j, 'r-1'), 'utf8')).not_before_ms
  assert.ok(nb >= wall + 29000 && nb <= Date.now() + 30000, `not_before_ms ${nb}`)
  j.close() // the process "dies": its claims go with it
  const fresh = open(dir)
  const now = performance.now()
  const wallNow = Date.now()
  const r = fresh.replay({ now, wallMs: wallNow })
  assert.equal(r.settlements.length, 1)
  const a = r.settlements[0].pollAction()
  assert.equal(a.type, 'send')
  assert.equal(a.attempt.key, s.key)
  assert.ok(a.attempt.dueMs >= now + (nb - wallNow) - 1, `no retry before the persisted not_before_ms (due in ${a.attempt.dueMs - now} ms)`)
  fresh.releaseClaim('r-1')
})

test('a truncated record and a hand-edited record are quarantined (renamed aside, reported), the valid one still replays', (t) => {
  const dir = tempDir(t)
  const j = open(dir)
  for (const id of ['good', 'cut', 'edited', 'version']) j.persist(commit(id), performance.now())
  for (const id of ['good', 'cut', 'edited', 'version']) j.releaseClaim(id)
  const cut = recordPath(j, 'cut')
  writeFileSync(cut, readFileSync(cut).subarray(0, 40))
  const edited = recordPath(j, 'edited')
  // A hand edit the journal reads (bodies are kept verbatim) but the settlement
  // refuses: an amount beyond 64 bits.
  writeFileSync(edited, readFileSync(edited, 'utf8').replace('"amount":900', '"amount":99999999999999999999999'))
  const ver = recordPath(j, 'version')
  const vrec = JSON.parse(readFileSync(ver, 'utf8'))
  vrec.version = 99
  writeFileSync(ver, JSON.stringify(vrec))
  const r = open(dir).replay({ now: performance.now(), wallMs: Date.now() })
  assert.deepEqual(r.settlements.map((s) => s.reservationId), ['good'])
  const files = r.quarantined.map((q) => q.file).sort()
  assert.ok(files.includes(`v2-${sha('cut')}.json`), JSON.stringify(r.quarantined))
  assert.ok(files.includes(`v2-${sha('version')}.json`), JSON.stringify(r.quarantined))
  for (const q of r.quarantined) {
    assert.equal(typeof q.reason, 'string')
    assert.ok(q.movedTo === null || existsSync(join(j.dir, q.movedTo)), 'renamed aside, never deleted')
  }
  assert.ok(!existsSync(cut))
  assert.ok(readdirSync(j.dir).some((f) => f.endsWith('.corrupt')))
  assert.ok(files.includes(`v2-${sha('edited')}.json`), 'a record the settlement refuses is quarantined too')
  assert.ok(!existsSync(edited))
})

test('reservation ids with "/", NUL and 10,000 characters', (t) => {
  const dir = tempDir(t)
  const j = open(dir)
  // "/" is an ordinary character: the file name is the sha256 of the exact id.
  const slash = 'tenant/a/../r-1'
  j.persist(commit(slash), performance.now())
  assert.ok(existsSync(recordPath(j, slash)))
  assert.deepEqual(readdirSync(j.dir).filter((f) => f.endsWith('.json')), [`v2-${sha(slash)}.json`])
  assert.equal(j.remove(slash), true)
  assert.equal(j.remove(slash), false)
  // NUL and 10,000 characters: the settlement refuses them (typed, nothing written) ...
  for (const id of ['a\0b', 'x'.repeat(10000)]) {
    assert.throws(() => commit(id), (e) => e instanceof RangeError && e.code === 'ERR_LEASEBEAT_INVALID_CONFIG')
    // ... and the journal handles any id without touching anything else.
    assert.equal(j.remove(id), false)
    assert.equal(j.quarantine(id), null)
    j.releaseClaim(id)
  }
  assert.deepEqual(readdirSync(j.dir).filter((f) => f.endsWith('.json')), [])
})

test('a symlinked journal directory (or partition) is refused, never followed', (t) => {
  const dir = tempDir(t)
  const real = join(dir, 'real')
  mkdirSync(real)
  const link = join(dir, 'link')
  symlinkSync(real, link)
  assert.throws(() => open(link), journalErr('symlink'))
  // A partition replaced by a symlink.
  const j = open(real)
  const part = j.dir
  rmSync(part, { recursive: true })
  const elsewhere = join(dir, 'elsewhere')
  mkdirSync(elsewhere)
  symlinkSync(elsewhere, part)
  assert.throws(() => open(real), journalErr('symlink'))
  assert.deepEqual(readdirSync(elsewhere), [])
})

test('a journal directory that is not writable: a typed error on open, persist_failed on a write', { skip: isRoot && 'running as root (permissions do not apply); see the read-only mount test' }, (t) => {
  const dir = tempDir(t)
  const ro = join(dir, 'ro')
  mkdirSync(ro, { mode: 0o500 })
  t.after(() => chmodSync(ro, 0o700))
  assert.throws(() => open(ro), journalErr('not_writable'))
  const ok = join(dir, 'ok')
  const j = open(ok)
  chmodSync(j.dir, 0o500)
  t.after(() => chmodSync(j.dir, 0o700))
  const d = j.persist(commit(), performance.now())
  assert.deepEqual(d.warnings, ['persist_failed'], 'SP-3: the failure is reported, the request still goes')
  assert.equal(d.next, 'commit')
  assert.match(d.detail, /not_writable/)
})

function tryMount (t, opts) {
  if (!isRoot) return null
  const dir = mkdtempSync(join(tmpdir(), 'leasebeat-node-journal-mnt-'))
  const mnt = join(dir, 'mnt')
  mkdirSync(mnt)
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', opts, 'tmpfs', mnt])
  t.after(() => {
    if (r.status === 0) spawnSync('umount', ['-l', mnt])
    rmSync(dir, { recursive: true, force: true })
  })
  return r.status === 0 ? mnt : null
}

test('a read-only file system: not_writable (root: a read-only tmpfs)', (t) => {
  const mnt = tryMount(t, 'size=64k,ro')
  if (mnt === null) return t.skip('cannot mount a tmpfs here (not root)')
  assert.throws(() => open(join(mnt, 'journal')), journalErr('not_writable'))
})

test('a full disk (a 16 KiB tmpfs): persist_failed with the no_space error, the previous record intact', (t) => {
  const mnt = tryMount(t, 'size=16k')
  if (mnt === null) return t.skip('cannot mount a tmpfs here (not root)')
  const j = open(join(mnt, 'journal'))
  const first = commit('first')
  assert.deepEqual(j.persist(first, performance.now()).warnings, [])
  const before = readFileSync(recordPath(j, 'first'))
  // Fill the file system.
  try {
    writeFileSync(join(mnt, 'filler'), Buffer.alloc(64 * 1024))
  } catch (e) {
    assert.equal(e.code, 'ENOSPC')
  }
  const big = new Settlement({ reservationId: 'second', baseUrl: BASE, commit: { ...COMMIT, metadata: { pad: 'x'.repeat(8192) } } }, performance.now(), Date.now())
  const d = j.persist(big, performance.now())
  assert.deepEqual(d.warnings, ['persist_failed'])
  assert.match(d.detail, /no_space/)
  assert.equal(d.next, 'commit', 'SP-3: the request still goes')
  assert.ok(!existsSync(recordPath(j, 'second')))
  assert.deepEqual(readFileSync(recordPath(j, 'first')), before)
  assert.deepEqual(readdirSync(j.dir).filter((f) => f.endsWith('.tmp')), [], 'no temporary file left behind')
  j.releaseClaim('first')
  j.close()
})

test('a full disk (a child process with a 4 KiB file-size limit): persist_failed, nothing thrown, no partial record', (t) => {
  const dir = tempDir(t)
  const script = join(dir, 'child.mjs')
  const pkg = fileURLToPath(import.meta.resolve('leasebeat'))
  writeFileSync(script, `
    import { createRequire } from 'node:module'
    const { Journal, Settlement } = createRequire(import.meta.url)(${JSON.stringify(pkg)})
    const j = Journal.open({ dir: ${JSON.stringify(join(dir, 'journal'))}, baseUrl: 'http://x', apiKey: 'k' })
    const s = new Settlement({ reservationId: 'r-big', baseUrl: 'http://x', commit: { actual: { unit: 'TOKENS', amount: 1 }, metadata: { pad: 'x'.repeat(20000) } } }, 0, Date.now())
    const d = j.persist(s, 1)
    console.log(JSON.stringify({ warnings: d.warnings, detail: d.detail, next: d.next }))
  `)
  // SIGXFSZ ignored (inherited), so the write fails with EFBIG instead of killing the child.
  const out = execFileSync('bash', ['-c', `trap '' XFSZ; ulimit -f 4; exec "${process.execPath}" "${script}"`], { encoding: 'utf8' })
  const d = JSON.parse(out.trim().split('\n').pop())
  assert.deepEqual(d.warnings, ['persist_failed'])
  assert.equal(d.next, 'commit')
  assert.match(d.detail, /journal (io|no_space)/)
  const part = readdirSync(join(dir, 'journal'))
  assert.equal(part.length, 1)
  assert.deepEqual(readdirSync(join(dir, 'journal', part[0])).filter((f) => f.endsWith('.json') || f.endsWith('.tmp')), [])
})

test('bad input types are TypeErrors/RangeErrors with ERR_LEASEBEAT_INVALID_ARGUMENT, nothing touched', (t) => {
  const dir = tempDir(t)
  const bad = (e) => (e instanceof TypeError || e instanceof RangeError) && e.code === 'ERR_LEASEBEAT_INVALID_ARGUMENT'
  for (const o of [undefined, null, 1, 'dir', [], { baseUrl: BASE }, { apiKey: KEY }, { dir, baseUrl: 1, apiKey: KEY },
    { dir, baseUrl: BASE, apiKey: KEY, extra: 1 }, { dir: '', baseUrl: BASE, apiKey: KEY }, { dir: 'a\0b', baseUrl: BASE, apiKey: KEY },
    { dir: 5, baseUrl: BASE, apiKey: KEY }]) {
    assert.throws(() => Journal.open(o), bad, JSON.stringify(o))
  }
  const j = open(dir)
  for (const s of [undefined, null, {}, 'r-1', j]) assert.throws(() => j.persist(s, 0), bad)
  assert.throws(() => j.persist(commit(), 'now'), bad)
  assert.throws(() => j.persist(commit(), -1), bad)
  assert.throws(() => j.finish({}), bad)
  for (const id of [undefined, null, 1, {}]) {
    assert.throws(() => j.remove(id), bad)
    assert.throws(() => j.quarantine(id), bad)
    assert.throws(() => j.releaseClaim(id), bad)
  }
  for (const o of [undefined, null, {}, { now: 0 }, { wallMs: 0 }, { now: 'x', wallMs: 0 }, { now: 0, wallMs: -1 }, { now: 0, wallMs: 0, x: 1 },
    { now: 0, wallMs: 0, retry: { maxAttempts: 'a' } }]) {
    assert.throws(() => j.replay(o), bad, JSON.stringify(o))
  }
  assert.deepEqual(readdirSync(j.dir), [])
  // A settlement that is not asking for a persist: the core's state error.
  const s = commit()
  j.persist(s, performance.now())
  assert.throws(() => j.persist(s, performance.now()), (e) => e instanceof Error && /^ERR_LEASEBEAT_/.test(e.code))
  j.releaseClaim('r-1')
})

test('partitions: a tenant keeps its records across API keys; the API key is never stored', (t) => {
  const dir = tempDir(t)
  const a = open(dir, { apiKey: 'key-old-secret', tenant: 'acme' })
  a.persist(commit('r-t'), performance.now())
  const aDir = a.dir
  a.releaseClaim('r-t')
  a.close()
  const b = open(dir, { apiKey: 'key-new', tenant: 'acme' })
  assert.equal(b.dir, aDir)
  const r = b.replay({ now: performance.now(), wallMs: Date.now() })
  assert.deepEqual(r.settlements.map((s) => s.reservationId), ['r-t'])
  b.releaseClaim('r-t')
  for (const f of readdirSync(b.dir)) assert.ok(!readFileSync(join(b.dir, f), 'utf8').includes('key-old-secret'))
  // Without a tenant, another key is another partition.
  assert.notEqual(open(dir, { apiKey: 'other' }).dir, aDir)
  // CYCLES_JOURNAL_DIR is the default base directory.
  const env = spawnSync(process.execPath, ['-e', `const { Journal } = require(${JSON.stringify(fileURLToPath(import.meta.resolve('leasebeat')))}); console.log(Journal.open({ baseUrl: 'http://x', apiKey: 'k' }).dir)`],
    { env: { ...process.env, CYCLES_JOURNAL_DIR: join(dir, 'env') }, encoding: 'utf8' })
  assert.equal(env.status, 0, env.stderr)
  assert.ok(env.stdout.trim().startsWith(join(dir, 'env')), env.stdout)
})
