// the part of a run's hand-off both sides run (lane.mjs says how it works): a lane's ring in shared memory, its port
// protocol and the pair's back-off. a script whose value is `{ lane, backoff, layout }`, evaluated by lane.mjs in node and
// by the isolate's driver inside the isolate, each with its own `codec` for moving a string's utf-16 units
;(() => {
  // biome-ignore lint/suspicious/noRedundantUseStrict: evaluated as a script, not as a module
  'use strict'
  const { load, store, add, sub, compareExchange } = Atomics
  /** code units of each lane's ring; a longer message goes through the port */
  const ringUnits = 16384
  const maxUnits = ringUnits / 4
  // a lane's header: units used in its ring; messages sent and taken through its port; 1 while the receiver spins (2: it
  // may not run for a while yet); 1 while a doorbell is on its way; then counts for `handoffCounts`: spins that caught a
  // message, spins that did not, messages that took the ring
  const USED = 0
  const SENT = 1
  const TAKEN = 2
  const AWAKE = 3
  const RUNG = 4
  const CAUGHT = 5
  const MISSED = 6
  const RING = 7
  const wrap = 0xffff
  // the pair's back-off: the worker's calls so far, the call from which both spin again, each side's misses in a row
  const CALLS = 18
  const UNTIL = 19
  const MISSES = 20
  const HOST_MISSES = 21

  /**
   * shared, so that both sides spin at the same hand-offs (one spinning alone misses its peer and backs off too): a spin
   * that caught nothing makes both sleep through the next 1, 3, 7 … 255 calls (after 1 … 8 misses in a row of that side),
   * one that caught resets that side's count. each side counts its own misses (a slow tool makes every spin for a reply
   * miss while the host's spins for the next call catch). the worker counts its calls; `side` 0 is the program's, else the
   * host's, whose spin waits for a call one ahead
   */
  const backoff = (buffer, side) => {
    const h = new Int32Array(buffer, 0, 32)
    const own = side === 0 ? MISSES : HOST_MISSES
    return {
      called: () => add(h, CALLS, 1),
      /** whether to spin now: `ahead` is 1 where the spin waits for a call not made yet */
      may: (ahead) => load(h, CALLS) + ahead >= load(h, UNTIL),
      spun(caught) {
        if (caught) return void store(h, own, 0)
        const misses = Math.min(load(h, own) + 1, 8)
        store(h, own, misses)
        store(h, UNTIL, Math.max(load(h, UNTIL), load(h, CALLS) + (1 << misses)))
      },
    }
  }

  /**
   * lane 0 carries the worker's (or isolate's) messages to the host, lane 1 the host's replies. `port` has `postMessage`;
   * `receive` pulls the next message sent through it, if it can (else they are handed to `port()`); `codec` writes a
   * string into the ring's units and reads one out. a malformed ring (an untrusted writer) is read no further: `malformed`
   */
  const lane = (buffer, index, port, receive, malformed, codec) => {
    const h = new Int32Array(buffer, 32 * index, 8)
    const units = new Uint16Array(buffer, 128 + index * 2 * ringUnits, ringUnits)
    let write = 0
    let read = 0
    let broken = false

    const pending = () => load(h, USED) > 0 || load(h, SENT) !== load(h, TAKEN)

    // a message is its length in two units, then its text, padded to an even count; 0xffff as the second unit of a
    // length ends the ring's content there, and it goes on at 0
    const put = (text) => {
      const length = text.length
      const size = 2 + length + (length & 1)
      if (size > maxUnits) return false
      const gap = write + size > ringUnits ? ringUnits - write : 0
      if (load(h, USED) + gap + size > ringUnits) return false
      if (gap > 0) {
        units[write + 1] = wrap
        write = 0
      }
      units[write] = length & 0xffff
      units[write + 1] = length >>> 16
      codec.write(units, write + 2, text)
      write = (write + size) % ringUnits
      add(h, USED, gap + size)
      add(h, RING, 1)
      return true
    }

    const spun = (caught) => add(h, caught ? CAUGHT : MISSED, 1)
    const fault = () => {
      broken = true
      malformed()
    }

    // every length and position is checked before it is used, and one drain takes no more messages than the ring holds:
    // a writer that broke the layout cannot make this read out of bounds or go on for ever, it only ends the lane
    const drainRing = (handle, limit) => {
      let taken = 0
      while (!broken && taken < limit) {
        const used = load(h, USED)
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
          sub(h, USED, ringUnits - read)
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
        const text = codec.read(units, read + 2, length)
        read = (read + size) % ringUnits
        sub(h, USED, size)
        taken++
        handle(text)
      }
      return taken
    }

    // while the receiver spins (or is about to run), and nothing sent through the port waits
    const open = () => load(h, AWAKE) !== 0 && load(h, SENT) === load(h, TAKEN)
    const offer = (message) => {
      if (typeof message !== 'string' || !open() || !put(message)) return false
      // the receiver may have stopped spinning meanwhile, without seeing it: then its doorbell wakes it
      if (load(h, AWAKE) === 0 && compareExchange(h, RUNG, 0, 1) === 0) port.postMessage(0)
      return true
    }

    return {
      /** a new run on the same buffer: both sides at the ring's start, nobody spinning, what the last left untaken forgotten */
      clear() {
        for (const at of [USED, AWAKE, RUNG]) store(h, at, 0)
        store(h, TAKEN, load(h, SENT))
        write = 0
        read = 0
        broken = false
      },
      /** sends `message`: through the ring when the receiver spins and it is a string that fits, else through the port */
      send(message) {
        if (offer(message)) return
        add(h, SENT, 1)
        return port.postMessage(message)
      },
      /** sends `message` through the ring if it can (see `send`): false, and nothing sent, when it would take the port */
      offer,
      /** whether a message sent now may take the ring (a sender that builds it only for the ring asks first) */
      open,
      /** takes up to `limit` messages waiting, in the order they were sent, and hands each to `handle`; returns how many */
      take(handle, limit = Number.POSITIVE_INFINITY) {
        let taken = drainRing(handle, limit)
        while (taken < limit && load(h, SENT) !== load(h, TAKEN)) {
          const next = receive()
          if (next === undefined) break
          if (next.message === 0) {
            store(h, RUNG, 0)
            taken += drainRing(handle, limit - taken)
            continue
          }
          add(h, TAKEN, 1)
          taken++
          handle(next.message)
          taken += drainRing(handle, limit - taken)
        }
        return taken
      },
      /** what the port's event brought: a doorbell (the ring is read), or a message, which comes after what the ring holds */
      port(message, handle) {
        if (message === 0) store(h, RUNG, 0)
        drainRing(handle, Number.POSITIVE_INFINITY)
        if (message === 0) return
        add(h, TAKEN, 1)
        handle(message)
      },
      /**
       * marks the receiver as about to spin, before it posts what the message answers (the answer may come before the post
       * returns). `spin` or `unwatch` follows. `how` 2: it may not run for a while (a sender takes the ring, but no spin)
       */
      watch(how = 1) {
        store(h, AWAKE, how)
      },
      /** no spin after all: true when something came meanwhile (take it; nothing rang for the ring) */
      unwatch() {
        store(h, AWAKE, 0)
        return pending()
      },
      pending,
      /** counts a spin of the receiver's, which caught a message or did not */
      spun,
      /** spins up to `ms` for a message, marked as spinning so that the sender uses the ring; true when one came (take it) */
      spin(ms) {
        store(h, AWAKE, 1)
        const started = performance.now()
        while (!pending() && performance.now() - started < ms) {}
        store(h, AWAKE, 0)
        const caught = pending()
        spun(caught)
        return caught
      },
    }
  }

  /** int32 indexes in lane `i`'s header at `8 * i`; its ring at byte `128 + i * 2 * ringUnits` */
  const layout = Object.freeze({ __proto__: null, ringUnits, maxUnits, rings: 128, USED, SENT, TAKEN, CAUGHT, MISSED, RING })
  return Object.freeze({ __proto__: null, lane, backoff, layout })
})()
