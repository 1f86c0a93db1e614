import { Heartbeat, runHeartbeat } from 'leasebeat'
import { startServer, API_KEY } from './serve.mjs'
import { setMaxListeners } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
const N = Number(process.argv[2])
const server = await startServer(['--max-lead-ms', '30000'])
const ac = new AbortController()
setMaxListeners(N + 10, ac.signal)
const t0 = performance.now()
const T = () => (performance.now() - t0).toFixed(0)
const reasons = {}; const outcomes = {}
let marked = 0; const seen = new Set(); let settle; const all = new Promise((r) => { settle = r })
const mark = (i) => { if (!seen.has(i)) { seen.add(i); if (++marked === N) settle() } }
const runs = []
let finErr = 0; const finMsg = []
const rtts = []
for (let i = 0; i < N; i++) {
  const hb = new Heartbeat({ ttlMs: 30000, requestTimeoutMs: 5000, createRequest: { subject: { tenant: 'a' }, action: { kind: 'x', name: 'y' }, estimate: { unit: 'TOKENS', amount: 1 } } })
  runs.push(runHeartbeat(hb, { baseUrl: server.url, apiKey: API_KEY, signal: ac.signal, finalize: 'release', onFinalize: (r) => { if (r.error) { finErr++; finMsg.push(String(r.error?.message ?? r.error)) } },
    onDecision: (d) => { outcomes[d.outcome] = (outcomes[d.outcome] ?? 0) + 1; if (d.numbers.rtt !== undefined) rtts.push(d.numbers.rtt); if (d.next === 'stop' || (hb.attempt?.keyIndex > 2)) mark(i) } }).then((s) => { reasons[s.reason] = (reasons[s.reason] ?? 0) + 1 }))
  await sleep(10)
}
console.log(T(), 'started all')
await all
console.log(T(), 'all beat', outcomes, 'max rtt', Math.max(...rtts))
ac.abort()
await Promise.all(runs)
console.log(T(), 'all stopped', reasons)
console.log(T(), 'creates', server.requests('create').length, 'extends', server.requests('extend').length, 'releases', server.requests('release').length, 'lapses', server.lapses().length)
const lap = server.lapses().slice(0, 3)
for (const l of lap) {
  console.log(JSON.stringify(l))
  for (const e of server.requests()) if (e.reservation_id === l.reservation_id || (e.endpoint === 'create' && e.response.includes('"' + l.reservation_id + '"'))) console.log('  ', e.endpoint, e.arrived_ms, e.t_ms, e.status, e.outcome, (e.response ?? '').slice(0, 150))
}
console.log('finalize errors', finErr, [...new Set(finMsg)].slice(0, 3))
await server.close()
