// one direction of a run's hand-off between the host and its worker or isolate (plain js: the worker's entry loads it
// too). while the receiver spins for a message, a string that fits goes through a ring in shared memory, read with no
// syscall and no turn of its event loop; otherwise through the lane's port, which wakes it. the ring is written only
// while every message sent through the port was taken, so order is kept. the ring, the port protocol and the back-off are
// lane-script.js, which the isolate's driver evaluates inside the isolate too: this is their node side (a Buffer moves
// the ring's text), and what only the host counts
import { readFileSync } from 'node:fs'
import { runInThisContext } from 'node:vm'
import { receiveMessageOnPort } from 'node:worker_threads'

/** the source of lane-script.js, for a side of the hand-off that evaluates it elsewhere (the isolate's driver) */
export const laneSource = readFileSync(new URL('./lane-script.js', import.meta.url), 'utf8')
const shared = runInThisContext(laneSource, { filename: 'faber-lane.js' })
/** `backoff(buffer, side?)`: the back-off both sides of a worker share; the host's unless `side` is 0 */
export const { layout, backoff } = shared
const { ringUnits, RING, SENT, CAUGHT, MISSED } = layout

/** the layout of the buffer the two sides of a worker share: two lane headers, the worker's `waited`, two rings */
export const handoffBytes = 128 + 4 * ringUnits
export const handoffWaited = 64

/** runs going on in this process, across sandboxes and backends: nobody spins while more than one is */
export const runsActive = new Int32Array(new SharedArrayBuffer(4))

/**
 * the host's bound on replies in a row after which it spins for the next message: false once they went on for more than
 * `ms` since the event loop last turned
 */
export function burst(ms = 2) {
  let from
  return () => {
    const now = performance.now()
    if (from === undefined) {
      from = now
      setImmediate(() => (from = undefined))
      return true
    }
    return now - from <= ms
  }
}

/**
 * what a worker's hand-off did so far: per lane (0: the worker's messages, 1: the host's replies), messages sent through
 * the ring and through the port, and the receiver's spins that caught a message and that did not
 */
export function handoffCounts(buffer) {
  const h = new Int32Array(buffer, 0, 16)
  return [0, 8].map((at) => ({ ring: h[at + RING], port: h[at + SENT], caught: h[at + CAUGHT], missed: h[at + MISSED] }))
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
 * lane 0 carries the worker's messages to the host, lane 1 the host's replies (lane-script.js). `port` is a MessagePort,
 * or anything with `postMessage` when messages that do not take the ring come some other way (`receive` then says there
 * is none to pull: they are handed to `port()` as they come). `malformed`: the ring's content was, and is read no further
 */
export function lane(buffer, index, port, { receive = () => receiveMessageOnPort(port), malformed = () => {} } = {}) {
  const bytes = Buffer.from(buffer, 128 + index * 2 * ringUnits, 2 * ringUnits)
  const codec = {
    write: (_units, at, text) => bytes.write(text, 2 * at, 'utf16le'),
    read: (_units, at, length) => bytes.toString('utf16le', 2 * at, 2 * (at + length)),
  }
  return shared.lane(buffer, index, port, receive, malformed, codec)
}
