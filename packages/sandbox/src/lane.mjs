// one direction of a run's hand-off between the host and its worker or isolate (plain js: the worker's entry loads it
// too). while the receiving side spins for a message (`spin`), a string that fits goes through a ring in shared memory,
// which it reads with no syscall and no turn of its event loop; otherwise a message goes through the lane's port as
// before, which wakes the receiver's event loop. order is kept: the ring is written only while every message sent through
// the port was taken, so what the ring holds was always sent before what the port holds.
// the isolate backend's driver is the other side of its lanes, written out in the isolate (it has no Buffer): `layout`
// is what both agree on
import { receiveMessageOnPort } from 'node:worker_threads'

/** code units of each lane's ring; a longer message goes through the port */
const ringUnits = 16384
const maxUnits = ringUnits / 4
/** the layout of the buffer the two sides of a worker share: two lane headers, the worker's `waited`, two rings */
export const handoffBytes = 128 + 4 * ringUnits
export const handoffWaited = 64
// a lane's header: units used in its ring; messages sent and taken through its port; 1 while the receiver spins; 1 while
// a doorbell is on its way
const USED = 0
const SENT = 1
const TAKEN = 2
const AWAKE = 3
const RUNG = 4
// counts, for `handoffCounts`: spins that caught a message, spins that did not, messages that took the ring
const CAUGHT = 5
const MISSED = 6
const RING = 7
const wrap = 0xffff

// the pair's back-off, shared so that both sides spin at the same hand-offs (one spinning alone waits for the other's
// wake-up, misses, and backs off too): the worker's calls so far, the call from which they spin again, and each side's
// misses in a row (the worker's or isolate's, the host's)
const CALLS = 18
const UNTIL = 19
const MISSES = 20
const HOST_MISSES = 21

/**
 * where everything is in the buffer (int32 indexes; lane `i`'s header at `8 * i`, its ring at byte `rings + i * 2 *
 * ringUnits`), for the other side of a lane written elsewhere
 */
export const layout = Object.freeze({ ringUnits, maxUnits, rings: 128, wrap, USED, SENT, TAKEN, AWAKE, RUNG, CAUGHT, MISSED, RING, CALLS, UNTIL, MISSES })

/** runs going on in this process, across sandboxes and backends: nobody spins while more than one is */
export const runsActive = new Int32Array(new SharedArrayBuffer(4))

/**
 * the back-off both sides of a worker share: a spin that caught nothing makes both sleep at once through the next 1, 3,
 * 7 … 255 calls (after 1, 2, 3 … 8 misses in a row of that side), and one that caught its message starts that side's
 * count again. each side counts its own misses: the other's catches say nothing of its own (a slow tool makes every spin
 * for a reply miss while the host's spin for the next call catches each time, and the worker spun again after each).
 * the worker counts its calls (`called`); it spins for the reply to a call from the call on which spinning resumes, the
 * host for the call after its reply from the reply before it, so that both are awake together. `side` 1 is the host's
 * (the isolate's driver keeps the other side's count, MISSES, itself)
 */
export function backoff(buffer, side = 1) {
  const h = new Int32Array(buffer, 0, 32)
  const own = side === 1 ? HOST_MISSES : MISSES
  return {
    called: () => Atomics.add(h, CALLS, 1),
    /** whether to spin now: `ahead` is 1 on the host, whose spin waits for a call not made yet */
    may: (ahead) => Atomics.load(h, CALLS) + ahead >= Atomics.load(h, UNTIL),
    spun(caught) {
      if (caught) return void Atomics.store(h, own, 0)
      const misses = Math.min(Atomics.load(h, own) + 1, 8)
      Atomics.store(h, own, misses)
      Atomics.store(h, UNTIL, Math.max(Atomics.load(h, UNTIL), Atomics.load(h, CALLS) + (1 << misses)))
    },
  }
}

// ms of replies in a row after which the host's spins wait for its event loop to turn
const maxBurstMs = 2

/**
 * the host's bound on replies after which it spins for the next message (worker and isolate backends): at most
 * `maxBurstMs` of them in a row, from the first since the event loop last turned. the function it returns is false once
 * a burst went on longer
 */
export function burst() {
  let from
  return () => {
    const now = performance.now()
    if (from === undefined) {
      from = now
      setImmediate(() => (from = undefined))
      return true
    }
    return now - from <= maxBurstMs
  }
}

/**
 * what a worker's hand-off did so far: per lane (0: the worker's messages, 1: the host's replies), messages sent through
 * the ring and through the port, and the receiver's spins that caught a message and that did not
 */
export function handoffCounts(buffer) {
  const h = new Int32Array(buffer, 0, 16)
  return [0, 1].map((index) => {
    const at = 8 * index
    return { ring: h[at + RING], port: h[at + SENT], caught: h[at + CAUGHT], missed: h[at + MISSED] }
  })
}

/** what the hand-offs of a sandbox's units did (`handoffCounts` summed), over the buffers alive and those let go */
export function handoffTally() {
  const live = new Set()
  const gone = [0, 1].map(() => ({ ring: 0, port: 0, caught: 0, missed: 0 }))
  const addUp = (sums, buffer) =>
    handoffCounts(buffer).forEach((lane, index) => {
      for (const key of ['ring', 'port', 'caught', 'missed']) sums[index][key] += lane[key]
    })
  return {
    add: (buffer) => void live.add(buffer),
    remove(buffer) {
      if (live.delete(buffer)) addUp(gone, buffer)
    },
    stats() {
      const sums = gone.map((counts) => ({ ...counts }))
      for (const buffer of live) addUp(sums, buffer)
      return { calls: sums[0], replies: sums[1] }
    },
  }
}

/**
 * lane 0 carries the worker's messages to the host, lane 1 the host's replies; each side sends on one, takes from the
 * other. `port` is a MessagePort, or anything with `postMessage` when messages that do not take the ring come some other
 * way (`receive` then says there is none to pull: they are handed to `port()` as they come). a ring whose content is
 * malformed (a writer that cannot be trusted) is read no further, and `malformed` is told
 */
export function lane(buffer, index, port, { receive = () => receiveMessageOnPort(port), malformed = () => {} } = {}) {
  const h = new Int32Array(buffer, 32 * index, 8)
  const offset = 128 + index * 2 * ringUnits
  const units = new Uint16Array(buffer, offset, ringUnits)
  const bytes = Buffer.from(buffer, offset, 2 * ringUnits)
  let write = 0
  let read = 0
  let broken = false

  const pending = () => Atomics.load(h, USED) > 0 || Atomics.load(h, SENT) !== Atomics.load(h, TAKEN)

  // a message is its length in two units, then its text, padded to an even count; 0xffff as the second unit of a length
  // ends the ring's content there, and it goes on at 0
  const put = (text) => {
    const length = text.length
    const size = 2 + length + (length & 1)
    if (size > maxUnits) return false
    const gap = write + size > ringUnits ? ringUnits - write : 0
    if (Atomics.load(h, USED) + gap + size > ringUnits) return false
    if (gap > 0) {
      units[write + 1] = wrap
      write = 0
    }
    units[write] = length & 0xffff
    units[write + 1] = length >>> 16
    bytes.write(text, 2 * (write + 2), 'utf16le')
    write = (write + size) % ringUnits
    Atomics.add(h, USED, gap + size)
    Atomics.add(h, RING, 1)
    return true
  }

  const fault = () => {
    broken = true
    malformed()
  }

  // every length and position is checked against the ring before it is used, and one drain takes no more messages than
  // the ring holds at once (a writer only writes while the reader spins): a writer that broke the layout cannot make this
  // read out of bounds or go on for ever, it only ends the lane
  const drainRing = (handle, limit) => {
    let taken = 0
    while (!broken && taken < limit) {
      const used = Atomics.load(h, USED)
      if (used <= 0) break
      if (used > ringUnits || taken > ringUnits / 2) {
        fault()
        break
      }
      if (units[read + 1] === wrap) {
        if (ringUnits - read > used) {
          fault()
          break
        }
        Atomics.sub(h, USED, ringUnits - read)
        read = 0
        continue
      }
      const length = units[read] | (units[read + 1] << 16)
      const size = 2 + length + (length & 1)
      // (a high unit past 0x7fff makes `length` negative, which no bound below would catch)
      if (length < 0 || size > maxUnits || size > used || read + size > ringUnits) {
        fault()
        break
      }
      const text = bytes.toString('utf16le', 2 * (read + 2), 2 * (read + 2 + length))
      read = (read + size) % ringUnits
      Atomics.sub(h, USED, size)
      taken++
      handle(text)
    }
    return taken
  }

  const offer = (message) => {
    if (typeof message !== 'string' || Atomics.load(h, AWAKE) !== 1 || Atomics.load(h, SENT) !== Atomics.load(h, TAKEN) || !put(message)) return false
    // the receiver may have stopped spinning meanwhile, without seeing it: then its doorbell wakes it
    if (Atomics.load(h, AWAKE) === 0 && Atomics.compareExchange(h, RUNG, 0, 1) === 0) port.postMessage(0)
    return true
  }

  return {
    /**
     * a new run on the same buffer: both sides start again at the ring's start, nobody spinning, and what the last run
     * sent the other way and was never taken (it ended first) is forgotten
     */
    clear() {
      for (const at of [USED, AWAKE, RUNG]) Atomics.store(h, at, 0)
      Atomics.store(h, TAKEN, Atomics.load(h, SENT))
      write = 0
      read = 0
      broken = false
    },
    /** sends `message`: through the ring when the receiver spins and it is a string that fits, else through the port */
    send(message) {
      if (offer(message)) return
      Atomics.add(h, SENT, 1)
      port.postMessage(message)
    },
    /** sends `message` through the ring if it can (see `send`): false, and nothing sent, when it would take the port */
    offer,
    /** takes up to `limit` messages waiting, in the order they were sent, and hands each to `handle`; returns how many */
    take(handle, limit = Number.POSITIVE_INFINITY) {
      let taken = drainRing(handle, limit)
      while (taken < limit && Atomics.load(h, SENT) !== Atomics.load(h, TAKEN)) {
        const next = receive()
        if (next === undefined) break
        if (next.message === 0) {
          Atomics.store(h, RUNG, 0)
          taken += drainRing(handle, limit - taken)
          continue
        }
        Atomics.add(h, TAKEN, 1)
        taken++
        handle(next.message)
        taken += drainRing(handle, limit - taken)
      }
      return taken
    },
    /** what the port's event brought: a doorbell (the ring is read), or a message, which comes after what the ring holds */
    port(message, handle) {
      if (message === 0) Atomics.store(h, RUNG, 0)
      drainRing(handle, Number.POSITIVE_INFINITY)
      if (message === 0) return
      Atomics.add(h, TAKEN, 1)
      handle(message)
    },
    /**
     * marks the receiver as about to spin, before it posts what the message answers: an answer that comes at once (the
     * other thread may run before the post returns) takes the ring too. `spin` or `unwatch` follows. `how` 2 says the
     * receiver may not run for a while yet (a sender written for it takes the ring but does not spin for the answer)
     */
    watch(how = 1) {
      Atomics.store(h, AWAKE, how)
    },
    /** no spin after all: true when something came meanwhile (take it; nothing rang for the ring) */
    unwatch() {
      Atomics.store(h, AWAKE, 0)
      return pending()
    },
    /** spins up to `ms` for a message, marked as spinning so that the sender uses the ring; true when one came (take it) */
    spin(ms) {
      Atomics.store(h, AWAKE, 1)
      const started = performance.now()
      while (!pending() && performance.now() - started < ms) {}
      Atomics.store(h, AWAKE, 0)
      const caught = pending()
      Atomics.add(h, caught ? CAUGHT : MISSED, 1)
      return caught
    },
  }
}
