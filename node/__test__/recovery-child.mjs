// A worker process of the recovery tests (recovery.test.mjs): it uses only
// the public API of the installed `leasebeat` package, prints one JSON line
// per thing it saw on stdout, and can SIGKILL itself at a chosen settlement
// decision (the "process terminated" faults of the catalog). Configured by
// the JSON in LB_CHILD:
//   { mode: 'lease' | 'replay', url, apiKey, tenant?, dir,
//     createRequest, actual?, metrics?, metadata?, killOn?: { class, mode?, attempt?, afterMs? },
//     barrier?: a file to wait for before starting }
import { existsSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

import { Heartbeat, Settler, startLease } from 'leasebeat'

const cfg = JSON.parse(process.env.LB_CHILD)
const out = (o) => process.stdout.write(JSON.stringify(o, (k, v) => (typeof v === 'bigint' ? v.toString() : v)) + '\n')

/** SIGKILLs this process when a settlement decision matches `killOn`. */
function watch (d) {
  out({ type: 'decision', decision: d })
  const k = cfg.killOn
  if (k === undefined || d.class !== k.class || (k.mode !== undefined && d.mode !== k.mode)) return
  if (k.attempt !== undefined && d.attempt !== k.attempt) return
  if (k.afterMs === undefined) process.kill(process.pid, 'SIGKILL')
  else setTimeout(() => process.kill(process.pid, 'SIGKILL'), k.afterMs)
}

// The runner's timers never keep a process alive on their own (as the
// heartbeat's): this worker stays up until its settlements are done.
const keepAlive = setInterval(() => {}, 1 << 30)

if (cfg.barrier !== undefined) {
  out({ type: 'waiting' })
  while (!existsSync(cfg.barrier)) await sleep(2)
}

const journal = { dir: cfg.dir }
if (cfg.tenant !== undefined) journal.tenant = cfg.tenant

if (cfg.mode === 'replay') {
  // A fresh process: the settler replays the journal's partition on start.
  const settler = new Settler({
    baseUrl: cfg.url,
    apiKey: cfg.apiKey,
    journal,
    onDecision: ({ reservationId, decision }) => watch({ ...decision, reservationId }),
    onReplay: (report) => out({ type: 'replay', report: { ...report, settled: report.settled.map(brief) } })
  })
  await settler.replayed
  const { pending } = await settler.flush(20000)
  out({ type: 'done', pending })
} else {
  const hb = new Heartbeat({ ttlMs: cfg.ttlMs ?? 3000, requestTimeoutMs: 1000, createRequest: cfg.createRequest })
  // noReplay: a worker that only journals (the scenario's precondition),
  // without replaying what earlier workers left.
  const settler = new Settler({ baseUrl: cfg.url, apiKey: cfg.apiKey, journal, replay: cfg.noReplay !== true })
  const lease = startLease(hb, {
    baseUrl: cfg.url,
    apiKey: cfg.apiKey,
    settler,
    onSettlementDecision: watch,
    onHeartbeatFailure: (e) => out({ type: 'heartbeat_failure', event: { ...e, decision: undefined } })
  })
  const id = await lease.ready
  out({ type: 'ready', reservationId: id })
  const r = await lease.commit(cfg.actual, { metrics: cfg.metrics, metadata: cfg.metadata })
  out({ type: 'result', result: brief(r) })
  await lease.stopped
}
clearInterval(keepAlive)

function brief (r) {
  return { reservationId: r.reservationId, key: r.key, outcome: r.outcome, mode: r.mode, recordKept: r.recordKept, classes: r.decisions.map((d) => d.class) }
}
