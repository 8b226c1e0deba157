// the worker_threads backend's driver (contract.ts): a unit is a worker, each program a fresh vm context in it. plain js
// (typed in worker-driver.d.mts), so that a sandbox process loads it on plain node from a workspace's sources too
import { MessageChannel, Worker } from 'node:worker_threads'
import { argumentBytes, limitMessages, maxPendingCalls, overheadMb } from './budgets.mjs'
import { runsActive as active, backoff, burst, handoffBytes, handoffTally, handoffWaited, lane } from './lane.mjs'
import { workerTexts } from './prelude.mjs'
import { report } from './report.mjs'

const entry = new URL('./worker.mjs', import.meta.url)

// after posting a reply the host may spin a moment for the program's next call instead of going back to its event loop:
// at most `spinMs` per reply, only while one run is going on in the process (`active`, lane.mjs) and no other call of it
// waits on the host, and for at most a `burst` (lane.mjs) of replies in a row.
// a unit: { worker, memoryMb, runs, replies (lane.mjs: replies to the program's calls), inbox (what the worker sends
// during a run: calls, logs, its outcome) and inboxPort (the port it comes through when not by the ring), pair (the
// back-off the host and the worker share), waited (ms the worker spent spinning for replies: active time on its event
// loop that is not the program's) }. a call is a string (see onMessage), calls made together a list of them; every
// other report `[run id, kind, a, b, c, heap]` (report.mjs; no heap after an end: the worker serves no more runs)

export class WorkerDriver {
  backend = 'worker-vm'
  createFailure = 'could not start a sandbox worker'
  #seq = 0
  /** what the shared buffers of the workers, alive and ended, counted (for `handoffStats`) */
  handoffs = handoffTally()

  constructor(options = {}) {
    this.spinMs = options.spinMs ?? 0.05
  }

  start(slot, { request, limits, source }, reports) {
    const { worker } = slot
    const id = ++this.#seq
    const elu = worker.performance.eventLoopUtilization()
    const waitedBefore = slot.waited[0]
    const end = () => {
      slot.inboxPort.off('message', onPort)
      Atomics.sub(active, 0, 1)
      worker.off('error', onError)
      worker.off('exit', onExit)
      worker.unref()
    }
    // replies that come while others wait go together once this thread's microtasks are done: a fan-out's, as a few messages
    let batch = []
    const flush = () => {
      if (batch.length === 0) return
      const list = batch
      batch = []
      slot.replies.send(list.length === 1 ? list[0] : list)
    }
    const deliver = (call, reply) => {
      waiting--
      // a string (`id:call:text`, worker.mjs reads it), else an object
      const message = reply.ok ? `${id}:${call}:${reply.value}` : { id, call, text: reply.message, code: reply.code }
      const spin = expect()
      if (!spin && waiting > 0) {
        if (batch.push(message) === 1) process.nextTick(flush)
        return
      }
      flush()
      // marked before the post: the worker may run and call again before the post returns here
      if (spin) slot.inbox.watch()
      // through the ring while the worker spins for it, else the port
      slot.replies.send(message)
      if (!spin) return
      const caught = slot.inbox.spin(this.spinMs)
      slot.pair.spun(caught)
      if (caught) drain()
    }

    // whether to spin a moment for the worker's next message after a reply
    const within = burst()
    const expect = () => this.spinMs > 0 && !reports.ended() && waiting === 0 && Atomics.load(active, 0) <= 1 && slot.pair.may(1) && within()
    // a flood is taken 64 messages at a time, a turn of the event loop between (nothing rings for what is left)
    const drain = () => {
      if (!reports.ended() && slot.inbox.take(onMessage, 64) === 64) setImmediate(drain)
    }
    const onPort = (message) => slot.inbox.port(message, onMessage)
    // the calls forwarded and not answered yet: a reply is not worth a spin while others wait
    let waiting = 0
    const onMessage = (message) => {
      // the calls a stretch of the program made, together
      if (Array.isArray(message) && typeof message[0] === 'string') {
        for (const call of message) if (typeof call === 'string') onMessage(call)
        return
      }
      if (typeof message === 'string') {
        // a call: `id:call:site:name length:name json`
        const first = message.indexOf(':')
        if (+message.slice(0, first) !== id) return
        const second = message.indexOf(':', first + 1)
        const third = message.indexOf(':', second + 1)
        const fourth = message.indexOf(':', third + 1)
        const end = fourth + 1 + +message.slice(third + 1, fourth)
        const call = +message.slice(first + 1, second)
        if (report(reports, 'call', call, message.slice(fourth + 1, end), message.slice(end), +message.slice(second + 1, third))) waiting++
        return
      }
      if (Array.isArray(message) && message[0] === id) report(reports, message[1], message[2], message[3], message[4], message[5])
    }
    const onError = (error) => {
      if (error.code === 'ERR_WORKER_OUT_OF_MEMORY') reports.failed('memory', limitMessages.memory(limits))
      else reports.failed('crash', `the sandbox worker failed: ${error.message}`)
    }
    const onExit = (code) => reports.failed('crash', `the sandbox worker exited unexpectedly (code ${code})`)
    slot.inboxPort.on('message', onPort)
    Atomics.add(active, 0, 1)
    worker.on('error', onError)
    worker.on('exit', onExit)
    worker.ref()
    worker.postMessage({
      id,
      source,
      tools: request.tools,
      outputBytes: limits.outputBytes,
      bufferBytes: limits.memoryMb * 1024 * 1024,
      argumentBytes: argumentBytes(limits),
      maxPendingCalls,
      recorded: request.values && JSON.stringify(request.values.replay),
    })
    return {
      deliver,
      cpuUsed: () => worker.performance.eventLoopUtilization(elu).active - (slot.waited[0] - waitedBefore),
      end,
    }
  }

  dispose(slot) {
    // terminate() stops the worker's js at once; its promise only reports the thread's exit
    return slot.worker.terminate()
  }

  create(memoryMb, lost) {
    const handoff = new SharedArrayBuffer(handoffBytes)
    const { port1: replies, port2 } = new MessageChannel()
    const { port1: inbox, port2: toHost } = new MessageChannel()
    const worker = new Worker(entry, {
      env: {},
      argv: [],
      // the import() callback in worker.mjs is only consulted with this flag
      execArgv: ['--experimental-vm-modules'],
      workerData: { ...workerTexts, replies: port2, toHost, handoff, active, spinMs: this.spinMs },
      transferList: [port2, toHost],
      // the program's memoryMb on top of what the worker itself holds, so a program gets all of it
      resourceLimits: {
        maxOldGenerationSizeMb: memoryMb + overheadMb,
        maxYoungGenerationSizeMb: Math.max(1, Math.floor(memoryMb / 8)),
        stackSizeMb: 4,
      },
      // whatever the worker's thread writes (node's own warnings included) is piped here and never read: the host's
      // stdout may carry a protocol (MCP over stdio). reading it would keep the host alive with the worker idle and
      // unref'd (node refs the worker's port for good once its stdio flows); unread, the host buffers at most 16 KB of
      // it and the worker's further writes wait
      stdout: true,
      stderr: true,
    })
    worker.unref()
    // a worker can still fail after its run settled (out of memory while being terminated): never throw in the host
    worker.on('error', () => {})
    const slot = {
      worker,
      memoryMb,
      runs: 0,
      replies: lane(handoff, 1, replies),
      inbox: lane(handoff, 0, inbox),
      inboxPort: inbox,
      pair: backoff(handoff),
      waited: new Float64Array(handoff, handoffWaited, 1),
    }
    // an idle worker that dies leaves the pool
    this.handoffs.add(handoff)
    worker.once('exit', () => {
      this.handoffs.remove(handoff)
      replies.close()
      inbox.close()
      lost()
    })
    // the worker's one message on its own port is that it is ready; listeners left after it never act again
    return new Promise((resolve, reject) => {
      worker.once('message', () => resolve(slot))
      worker.once('error', reject)
      worker.once('exit', (code) => reject(new Error(`the sandbox worker exited with code ${code} while starting`)))
    })
  }
}
