// The fast crossing of decisions and attempts (hand-written; see
// src/fast.rs). Building a Decision or an Attempt object from native code
// costs one napi property set, with its key string internalized anew, per
// property: about 30 per decision plus a Buffer with a finalizer per
// attempt. Instead, hidden native methods write the values into one scratch
// ArrayBuffer (numbers as f64, nanosecond instants as u64, body bytes after
// the fixed slots) and the functions below build the same plain objects as
// object literals. What the compact form does not carry (a detail text, a
// number beyond 2^53-1, a body larger than the scratch) is flagged "slow"
// and built by the regular native method instead. The public methods keep
// their names, signatures, results and errors (__test__/fast.test.mjs
// checks both paths agree); argument validation stays in the addon.
'use strict'

const binding = require('./index.js')

const SLOW = 1
const RID = 1 << 1
const AT = 1 << 2
const AT_NS = 1 << 3
const KEY = 1 << 4
const KEY_INDEX = 1 << 5
const REASON = 1 << 6
const MODE = 1 << 7
const PROVEN = 1 << 8
const PROVEN_NS = 1 << 9
const EXPIRES = 1 << 10
const REMAINING = 1 << 11
const DUE_NS_SET = 1 << 1
const SENT_NS_SET = 1 << 2
const ZERO_WINDOW = 1 << 3
const BYTES = 512
const PRIMARY_NUMBERS = 0x7f // rtt, maxRtt, leadFloor, attemptBudget, safetyMargin, retryReserve, nextDelay

function install () {
  const { Heartbeat } = binding
  const proto = Heartbeat && Heartbeat.prototype
  if (!proto || typeof proto.__handle !== 'function' || typeof binding.__lbRespond !== 'function') return
  // For __test__/fast.test.mjs, which compares both paths: keep the regular
  // native methods (the hidden ones are still removed).
  const keepNative = process.env.LEASEBEAT_INTERNAL_SLOW_PATH === '1'
  const take = (name) => {
    const f = proto[name]
    delete proto[name]
    return f
  }
  const handle = take('__handle')
  // Node's `Buffer` global is an accessor: read it once.
  const allocUnsafe = Buffer.allocUnsafe
  // Raw Node-API callbacks (src/raw.rs): (handle, ...args), no receiver.
  const takeRaw = (name) => {
    const f = binding[name]
    delete binding[name]
    return f
  }
  const respond = takeRaw('__lbRespond')
  const respondBody = takeRaw('__lbRespondBody')
  const respondText = takeRaw('__lbRespondText')
  const respondIn = takeRaw('__lbRespondIn')
  const respondInText = takeRaw('__lbRespondInText')
  const register = takeRaw('__lbScratch')
  const poll = takeRaw('__lbPoll')
  const sent = takeRaw('__lbSent')
  const fail = takeRaw('__lbFail')
  const cancelFast = takeRaw('__lbCancel')
  const last = takeRaw('__lbLast')
  const get = takeRaw('__lbGet')
  // Per heartbeat: its handle (the external through which the raw
  // callbacks reach its state, made once by __handle), its reservation id
  // once known, and the key and body text of the last attempt handed out
  // (ids are unique per heartbeat). Kept under a symbol, or in a WeakMap for
  // a non-extensible heartbeat. `o` is the heartbeat itself: an object made
  // with Object.create(heartbeat) inherits the symbol property but is not a
  // Heartbeat (it has no native state of its own), and must not act on its
  // prototype's lease.
  const CACHE = Symbol('leasebeat.fast')
  const frozen = new WeakMap()
  function notHeartbeat () {
    const e = new TypeError('this is not a Heartbeat (an object made with Object.create(heartbeat) is not one either): call the method or getter on the Heartbeat itself')
    e.code = 'ERR_LEASEBEAT_INVALID_ARGUMENT'
    return e
  }
  function cacheOf (hb) {
    if (typeof hb !== 'object' || hb === null) throw notHeartbeat()
    let c = hb[CACHE]
    if (c === undefined || c.o !== hb) {
      c = frozen.get(hb)
      if (c === undefined) {
        let h
        try {
          h = handle.call(hb)
        } catch {
          throw notHeartbeat()
        }
        c = { o: hb, h, rid: null, id: -1, key: '', text: '', epoch: -1 }
        if (Object.isExtensible(hb)) Object.defineProperty(hb, CACHE, { value: c })
        else frozen.set(hb, c)
      }
    }
    return c
  }

  // Every public member refuses a receiver that is not a Heartbeat with the
  // same error on both paths; the members fast.js does not replace below
  // keep their native code behind that check.
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === 'constructor') continue
    const d = Object.getOwnPropertyDescriptor(proto, name)
    if (d.get) {
      const get = d.get
      Object.defineProperty(proto, name, { get: { [name] () { cacheOf(this); return get.call(this) } }[name] })
    } else if (typeof d.value === 'function') {
      const f = d.value
      Object.defineProperty(proto, name, { value: { [name] (...args) { cacheOf(this); return f.apply(this, args) } }[name] })
    }
  }
  if (keepNative) return
  // The regular methods (behind the receiver check above).
  const slow = {
    handleResponse: proto.handleResponse,
    pollAction: proto.pollAction,
    lastDecision: Object.getOwnPropertyDescriptor(proto, 'lastDecision').get,
    attempt: Object.getOwnPropertyDescriptor(proto, 'attempt').get,
    close: proto.close,
    reservationId: Object.getOwnPropertyDescriptor(proto, 'reservationId').get
  }

  // The string unions, in the order of the Rust enums (their codes).
  const NEXT = Object.values(binding.Next)
  const KEY_USE = Object.values(binding.KeyUse)
  const MODES = Object.values(binding.Mode)
  const OUTCOMES = Object.values(binding.OutcomeClass)
  const KINDS = Object.values(binding.AttemptKind)
  const REASONS = Object.values(binding.StopReason)
  const WARNING = binding.Warning.ExtensionBudgetDepleting

  // One scratch per module instance (each worker thread has its own); every
  // native call fills it and the caller reads it back before returning.
  const buffer = new ArrayBuffer(64 * 1024)
  const bytes = new Uint8Array(buffer)
  const f64 = new Float64Array(buffer, 0, BYTES / 8)
  const u64 = new BigUint64Array(buffer, 0, BYTES / 8)
  // Its address is registered once (the addon keeps it alive).
  register(bytes)
  // A string body without lone surrogates may be read as UTF-8 (one
  // Node-API call); any other goes the general way (UTF-16, whose read
  // refuses a lone surrogate with the documented error).
  const isWellFormed = String.prototype.isWellFormed

  // The action slots of the scratch hold the action pollAction() returns
  // for the heartbeat whose cache has `epoch === epoch`: handleResponse
  // writes it with the decision, and every other write of those slots bumps
  // `epoch`. Every call that changes a heartbeat's state resets its `epoch`.
  let epoch = 0
  function changed (hb) {
    cacheOf(hb).epoch = -1
  }

  // A getter's (or pollTimeout's) value through __lbGet (the codes of
  // Got::of in src/lib.rs; 8 is `closed`).
  function got (hb, code) {
    return get(cacheOf(hb).h, code)
  }

  function numbers () {
    const m = f64[14]
    if (m === PRIMARY_NUMBERS) {
      return { rtt: f64[15], maxRtt: f64[16], leadFloor: f64[17], attemptBudget: f64[18], safetyMargin: f64[19], retryReserve: f64[20], nextDelay: f64[21] }
    }
    const n = {}
    if (m & 1) n.rtt = f64[15]
    if (m & 2) n.maxRtt = f64[16]
    if (m & 4) n.leadFloor = f64[17]
    if (m & 8) n.attemptBudget = f64[18]
    if (m & 16) n.safetyMargin = f64[19]
    if (m & 32) n.retryReserve = f64[20]
    if (m & 64) n.nextDelay = f64[21]
    if (m & 128) n.lead = f64[22]
    if (m & 256) n.retryWindow = f64[23]
    if (m & 512) n.retryDelay = f64[24]
    if (m & 1024) n.leadMin = f64[25]
    if (m & 2048) n.grant = f64[26]
    if (m & 4096) n.cadence = f64[27]
    if (m & 8192) n.skips = f64[28]
    return n
  }

  // The decision the last native call wrote (`written` false: the slow path).
  function decision (c, written) {
    if (!written) return slow.lastDecision.call(c.o)
    const flags = f64[0]
    let rid = null
    if (flags & RID) {
      rid = c.rid
      if (rid === null) rid = c.rid = slow.reservationId.call(c.o)
    }
    const warnings = []
    for (let i = f64[13]; i > 0; i--) warnings.push(WARNING)
    return {
      next: NEXT[f64[1]],
      at: flags & AT ? f64[2] : null,
      atNs: flags & AT_NS ? u64[3] : null,
      key: flags & KEY ? KEY_USE[f64[4]] : null,
      keyIndex: flags & KEY_INDEX ? f64[5] : null,
      reason: flags & REASON ? REASONS[f64[6]] : null,
      mode: flags & MODE ? MODES[f64[7]] : null,
      numbers: numbers(),
      warnings,
      outcome: OUTCOMES[f64[8]],
      detail: null,
      reservationId: rid,
      provenUntil: flags & PROVEN ? f64[9] : null,
      provenUntilNs: flags & PROVEN_NS ? u64[10] : null,
      expiresAtMs: flags & EXPIRES ? f64[11] : null,
      remainingTtlMs: flags & REMAINING ? f64[12] : null
    }
  }

  // A fresh Buffer holding the body bytes the last __lbPoll wrote, allocated
  // by Buffer.allocUnsafe (small ones from Node's pool; faster than
  // Buffer.from of a view), then filled from a view of the scratch kept per
  // length (making a view per call, as `subarray` does, cost more than the
  // copy).
  const views = []
  function bodyBuffer (len) {
    const b = allocUnsafe(len)
    let v = views[len]
    if (v === undefined) v = views[len] = new Uint8Array(buffer, BYTES, len)
    b.set(v)
    return b
  }

  // Takes the key and body text of the attempt in the action slots, which
  // the addon returned because its id is new to this heartbeat's cache.
  function absorb (c, text) {
    const n = f64[41]
    c.id = f64[35]
    c.key = text.slice(0, n)
    c.text = text.slice(n)
  }

  // The attempt in the action slots (its key and text are in the cache).
  function attempt (c) {
    const flags = f64[32]
    return {
      id: f64[35],
      kind: KINDS[f64[36]],
      dueMs: f64[37],
      dueNs: flags & DUE_NS_SET ? u64[38] : null,
      key: c.key,
      keyIndex: f64[39],
      keyUse: KEY_USE[f64[40]],
      body: bodyBuffer(f64[42]),
      bodyText: c.text,
      sentNs: flags & SENT_NS_SET ? u64[43] : null,
      zeroWindowRetry: (flags & ZERO_WINDOW) !== 0
    }
  }

  function isPlainResponse (r) {
    if (typeof r !== 'object' || r === null || Object.getPrototypeOf(r) !== Object.prototype) return false
    for (const k in r) {
      if (k !== 'status' && k !== 'body' && k !== 'headers' && k !== 'timingUnknown') return false
    }
    return true
  }

  Object.defineProperties(proto, {
    handleResponse: {
      value: function handleResponse (attemptId, response, now) {
        const c = cacheOf(this)
        // Anything but a plain object of known properties goes the regular
        // way, which refuses it with the documented error.
        if (!isPlainResponse(response)) {
          c.epoch = -1
          return slow.handleResponse.call(this, attemptId, response, now)
        }
        // Each property read once, in the order the addon reads them.
        const status = response.status
        const headers = response.headers
        const body = response.body
        const timingUnknown = response.timingUnknown
        let text
        if (headers === undefined && timingUnknown === undefined) {
          const wellFormed = typeof body === 'string' && isWellFormed !== undefined && isWellFormed.call(body)
          if (typeof attemptId === 'number' && typeof status === 'number' && typeof now === 'number') {
            // The numbers through the scratch's input slots (src/fast.rs).
            f64[56] = attemptId
            f64[57] = status
            f64[58] = now
            f64[59] = c.id
            text = wellFormed ? respondInText(c.h, body) : respondIn(c.h, body)
          } else {
            text = wellFormed
              ? respondText(c.h, attemptId, status, body, now, c.id)
              : respondBody(c.h, attemptId, status, body, now, c.id)
          }
        } else {
          text = respond(c.h, attemptId, status, headers, body, timingUnknown, now, c.id)
        }
        c.epoch = ++epoch
        if (text !== null) absorb(c, text)
        return decision(c, (f64[0] & SLOW) === 0)
      }
    },
    handleSent: {
      value: function handleSent (attemptId, now) {
        const c = cacheOf(this)
        c.epoch = -1
        sent(c.h, attemptId, now)
      }
    },
    handleFailure: {
      value: function handleFailure (attemptId, failure, now) {
        const c = cacheOf(this)
        c.epoch = -1
        return decision(c, fail(c.h, attemptId, failure, now))
      }
    },
    cancel: {
      value: function cancel (now) {
        const c = cacheOf(this)
        c.epoch = -1
        return decision(c, cancelFast(c.h, now))
      }
    },
    pollAction: {
      value: function pollAction () {
        const c = cacheOf(this)
        if (c.epoch !== epoch) {
          const text = poll(c.h, c.id, false)
          c.epoch = ++epoch
          if (text !== null) absorb(c, text)
        }
        if (f64[32] & SLOW) return slow.pollAction.call(this)
        const type = f64[33]
        if (type === 2) return { type: 'stop', reason: REASONS[f64[34]] }
        return { type: type === 0 ? 'send' : 'await', attempt: attempt(c) }
      }
    },
    lastDecision: {
      get: function () {
        const c = cacheOf(this)
        const written = last(c.h)
        return written === null ? null : decision(c, written)
      }
    },
    attempt: {
      get: function () {
        const c = cacheOf(this)
        const text = poll(c.h, c.id, true)
        epoch++ // the slots now hold the attempt, not the action
        if (f64[32] & SLOW) return slow.attempt.call(this)
        if (f64[33] === 3) return null
        if (text !== null) absorb(c, text)
        return attempt(c)
      }
    },
    // The plain getters and pollTimeout(): one raw call each (the codes of
    // Got::of in src/lib.rs), the same values and errors.
    reservationId: { get: function () { return got(this, 0) } },
    stopReason: { get: function () { return got(this, 1) } },
    mode: { get: function () { return got(this, 2) } },
    pollTimeout: { value: function pollTimeout () { return got(this, 3) } },
    lastEventNs: { get: function () { return got(this, 4) } },
    ttlMs: { get: function () { return got(this, 5) } },
    requestTimeoutMs: { get: function () { return got(this, 6) } },
    maxRttMs: { get: function () { return got(this, 7) } },
    closed: { get: function () { return got(this, 8) } },
    close: {
      value: function close () {
        changed(this)
        return slow.close.call(this)
      }
    }
  })
}

install()
