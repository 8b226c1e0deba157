import { MessageChannel, Worker } from 'node:worker_threads'
import { expect } from 'chai'
import { handoffBytes, lane, layout } from '../src/lane.mjs'

// the hand-off's lanes between two threads, both sides spinning generously so that messages take the ring as well as the
// port: whatever way each one crosses, all arrive whole and in the order they were sent
describe('worker-vm: hand-off lanes', function () {
  this.timeout(30000)

  it('deliver every message whole and in order, through the ring and the port, back and forth', async () => {
    const buffer = new SharedArrayBuffer(handoffBytes)
    const there = new MessageChannel()
    const back = new MessageChannel()
    // the other side echoes each message it takes, spinning up to 2 ms for the next one
    const worker = new Worker(
      `const { workerData } = require('node:worker_threads')
       import(workerData.lane).then(({ lane }) => {
         const from = lane(workerData.buffer, 1, workerData.there)
         const to = lane(workerData.buffer, 0, workerData.back)
         const echo = (message) => to.send(message)
         workerData.there.on('message', (message) => {
           from.port(message, echo)
           while (from.spin(2)) from.take(echo)
         })
         workerData.back.postMessage('ready')
       })`,
      {
        eval: true,
        workerData: { lane: new URL('../src/lane.mjs', import.meta.url).href, buffer, there: there.port2, back: back.port2 },
        transferList: [there.port2, back.port2],
      },
    )
    const to = lane(buffer, 1, there.port1)
    const from = lane(buffer, 0, back.port1)
    await new Promise((resolve) => back.port1.once('message', resolve))
    const sizes = [0, 1, 2, 3, 4000, 4093, 4094, 4095, 4096, 5000, 30000]
    const sent: unknown[] = []
    for (let i = 0; i < 600; i++) {
      const size = sizes[i % sizes.length]
      // strings (ascii, outside it, a lone surrogate) and, now and then, an object, which always takes the port
      sent.push(i % 13 === 0 ? { i } : `${i}:${'é😀\ud800x'.repeat(size >> 2)}`.slice(0, size + String(i).length + 1))
    }
    const received: unknown[] = []
    const done = new Promise<void>((resolve) => {
      const take = (message: unknown) => {
        received.push(message)
        if (received.length === sent.length) resolve()
      }
      back.port1.on('message', (message) => from.port(message, take))
      // bursts of a few messages, each followed by a spin for the echoes, so that both sides are often spinning
      let next = 0
      const burst = () => {
        for (let k = 0; k < 5 && next < sent.length; k++) to.send(sent[next++])
        while (received.length < next && from.spin(2)) from.take(take)
        if (next < sent.length) setImmediate(burst)
      }
      burst()
    })
    await done
    await worker.terminate()
    back.port1.close()
    there.port1.close()
    expect(received).to.deep.equal(sent)
  })

  it('take nothing from a ring whose record claims a negative length, and say it is malformed', () => {
    // a writer that cannot be trusted (the isolate's side of its ring) left one record whose high length unit is past
    // 0x7fff: read as a signed length it is negative, which must end the lane, not hand on empty messages
    const buffer = new SharedArrayBuffer(handoffBytes)
    const units = new Uint16Array(buffer, layout.rings, layout.ringUnits)
    units.set([5, 0x8000, 104, 101, 108, 108, 111, 0])
    Atomics.store(new Int32Array(buffer, 0, 8), layout.USED, 8)
    let malformed = 0
    const taken: unknown[] = []
    const { port1, port2 } = new MessageChannel()
    try {
      const reader = lane(buffer, 0, port1, { malformed: () => malformed++ })
      reader.take((message) => taken.push(message))
      reader.take((message) => taken.push(message))
      expect(taken).to.deep.equal([])
      expect(malformed).to.equal(1)
    } finally {
      port1.close()
      port2.close()
    }
  })
})
