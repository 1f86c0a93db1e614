// The default transport (fetchTransport) reads at most MAX_BODY_BYTES of a
// response body and stops at the attempt's signal (issue 25, defect 5),
// against a small 127.0.0.1 server of this file that sends a 100 MB body, an
// endless chunked body, or a body that trickles forever. Asserted: the outcome
// (a response with an empty body, as the Rust driver returns for an over-cap
// body, or a 'timeout'), the bytes the server handed to the kernel, and that
// the client closed the connection. No assertion on wall time.
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { fetchTransport, TransportError, MAX_BODY_BYTES } from 'leasebeat'

const MB = 1_000_000
const SEND_LIMIT = 200 * MB
// Loopback socket buffers can hold a few MB the client never read.
const SLACK = 32 * MB

/**
 * A server answering one request with a 200 whose body `mode` makes: 'big'
 * (content-length 100 MB), 'chunked' (endless), 'trickle' (chunked, 10 bytes
 * per 50 ms, endless), 'exact' (exactly MAX_BODY_BYTES). Resolves to
 * `{ url, ended }`; `ended` resolves to `{ sent, closedByClient }`.
 */
async function bodyServer (mode) {
  let endedResolve
  const ended = new Promise((resolve) => { endedResolve = resolve })
  const server = createServer((sock) => {
    let sent = 0
    let head = Buffer.alloc(0)
    let finished = false
    const finish = (closedByClient) => {
      if (finished) return
      finished = true
      clearInterval(trickle)
      sock.destroy()
      server.close()
      endedResolve({ sent, closedByClient })
    }
    let trickle = null
    sock.on('error', () => finish(true))
    sock.on('close', () => finish(true))
    const block = Buffer.alloc(65536, 'x')
    const pump = (piece) => {
      // Writes while the socket takes them; resumes on 'drain'.
      while (sent < SEND_LIMIT && !sock.destroyed) {
        sent += piece.length
        if (!sock.write(piece)) return sock.once('drain', () => pump(piece))
      }
      if (sent >= SEND_LIMIT) finish(false)
    }
    sock.on('data', (b) => {
      if (head === null) return
      head = Buffer.concat([head, b])
      const at = head.indexOf('\r\n\r\n')
      if (at < 0) return
      const m = /content-length:\s*(\d+)/i.exec(head.subarray(0, at).toString())
      if (head.length < at + 4 + (m ? Number(m[1]) : 0)) return
      head = null
      if (mode === 'big') {
        sock.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000000\r\n\r\n')
        const bigPump = () => {
          while (sent < 100 * MB && !sock.destroyed) {
            sent += block.length
            if (!sock.write(block)) return sock.once('drain', bigPump)
          }
        }
        bigPump()
      } else if (mode === 'exact') {
        const body = Buffer.alloc(MAX_BODY_BYTES, 'y')
        sock.write(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`)
        sock.write(body)
        sent = body.length
      } else {
        sock.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n')
        if (mode === 'trickle') {
          trickle = setInterval(() => { sent += 10; sock.write('a\r\n0123456789\r\n') }, 50)
        } else {
          pump(Buffer.concat([Buffer.from('10000\r\n'), block, Buffer.from('\r\n')]))
        }
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  server.unref()
  return { url: `http://127.0.0.1:${server.address().port}`, ended }
}

const request = { kind: 'extend', reservationId: 'r-1', key: 'k-1', body: new TextEncoder().encode('{"idempotency_key":"k-1","extend_by_ms":60000}'), attempt: null }

describe('fetchTransport body limit', () => {
  test('MAX_BODY_BYTES is the Rust driver\'s 1 MiB', () => {
    assert.equal(MAX_BODY_BYTES, 1024 * 1024)
  })

  for (const mode of ['big', 'chunked']) {
    test(`an over-cap body (${mode}) is not read: the response has an empty body`, async () => {
      const { url, ended } = await bodyServer(mode)
      const res = await fetchTransport({ baseUrl: url, apiKey: 'key' })(request, AbortSignal.timeout(60_000))
      assert.equal(res.status, 200)
      assert.equal(res.body.byteLength, 0)
      const { sent, closedByClient } = await ended
      assert.ok(closedByClient, 'the client closed the connection')
      assert.ok(sent < MAX_BODY_BYTES + SLACK, `the server sent ${sent} bytes`)
    })
  }

  test('a body of exactly the cap is read', async () => {
    const { url, ended } = await bodyServer('exact')
    const res = await fetchTransport({ baseUrl: url, apiKey: 'key' })(request, AbortSignal.timeout(60_000))
    assert.equal(res.status, 200)
    assert.equal(res.body.byteLength, MAX_BODY_BYTES)
    void ended
  })

  test('reading stops at the signal: a timeout, and the connection is closed', async () => {
    const { url, ended } = await bodyServer('trickle')
    await assert.rejects(
      fetchTransport({ baseUrl: url, apiKey: 'key' })(request, AbortSignal.timeout(300)),
      (err) => err instanceof TransportError && err.kind === 'timeout'
    )
    const { sent, closedByClient } = await ended
    assert.ok(closedByClient, 'the client closed the connection')
    assert.ok(sent < SEND_LIMIT)
  })
})
