import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import {
  argumentBytes,
  limitMessages,
  maxPendingCalls,
  overheadMb,
  type PoolOptions,
  type Program,
  type ProgramHandle,
  type ProgramReports,
  report,
  type SandboxDriver,
  SandboxPool,
  type Unit,
  workerTexts,
} from '@faber/sandbox/contract'

const entry = new URL('./quickjs-worker.mjs', import.meta.url)
// compiled once for the process: each unit's thread instantiates it with a memory of its own, sharing the code
// (node's types leave WebAssembly to the DOM library)
const { WebAssembly } = globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<object> } }
let compiled: Promise<object> | undefined
const wasmModule = () =>
  (compiled ??= readFile(createRequire(import.meta.url).resolve('@jitl/quickjs-ng-wasmfile-release-sync/wasm')).then((bytes) => WebAssembly.compile(bytes)))
const MB = 1024 * 1024
// well under the thread's stack: a deep recursion ends as QuickJS's RangeError first (5,000 plain frames fit in 1 MB)
const stackBytes = MB
const stackSizeMb = 4

export interface QuickJsSandboxOptions extends Omit<PoolOptions, 'maxRuns'> {
  /** runs a unit (a thread and its QuickJS module) serves before it is replaced (default 200) */
  maxRunsPerUnit?: number
}

interface Slot extends Unit {
  worker: Worker
  /** ms the thread spent making contexts and evaluating the prelude (quickjs-worker.mjs), not the programs' cpu */
  setupMs: Float64Array
}

/** a CodeRuntime on QuickJS compiled to WebAssembly (quickJsDriver) */
export class QuickJsSandbox extends SandboxPool<Slot> {
  constructor(options: QuickJsSandboxOptions = {}) {
    super(quickJsDriver, { ...options, maxRuns: options.maxRunsPerUnit })
  }
}

let seq = 0

/** the QuickJS backend (contract.ts): a unit is a worker thread with one QuickJS module, each program a fresh context in it */
export const quickJsDriver: SandboxDriver<Slot> = {
  backend: 'quickjs-wasm',
  createFailure: 'could not start a QuickJS worker',

  async create(memoryMb, lost) {
    const shared = new SharedArrayBuffer(8)
    const worker = new Worker(entry, {
      env: {},
      argv: [],
      execArgv: [],
      workerData: { ...workerTexts, memoryBytes: (memoryMb + overheadMb) * MB, stackBytes, wasmModule: await wasmModule(), shared },
      // the program's heap is the module's WebAssembly memory; the thread's own heap holds the glue and what crosses
      resourceLimits: { maxOldGenerationSizeMb: memoryMb + overheadMb, stackSizeMb },
      // never read: the host's stdout may carry a protocol (see @faber/sandbox's worker backend)
      stdout: true,
      stderr: true,
    })
    worker.unref()
    worker.on('error', () => {})
    const slot: Slot = { worker, memoryMb, runs: 0, setupMs: new Float64Array(shared) }
    worker.once('exit', lost)
    return new Promise<Slot>((resolve, reject) => {
      worker.once('message', () => resolve(slot))
      worker.once('error', reject)
      worker.once('exit', (code) => reject(new Error(`the QuickJS worker exited with code ${code} while starting`)))
    })
  },

  dispose: (slot) => slot.worker.terminate(),

  start({ worker, setupMs }, { request, limits }: Program, reports: ProgramReports): ProgramHandle {
    const id = ++seq
    const elu = worker.performance.eventLoopUtilization()
    const setupBefore = setupMs[0]
    const onMessage = (list: unknown) => {
      if (!Array.isArray(list)) return
      for (const message of list) if (Array.isArray(message) && message[0] === id) report(reports, message[1], message[2], message[3], message[4], message[5])
    }
    // the replies that came meanwhile go in one message, on the next microtask
    let replies: unknown[][] = []
    const send = () => {
      worker.postMessage({ t: 'replies', id, list: replies })
      replies = []
    }
    const onError = (error: Error & { code?: string }) =>
      reports.failed(error.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crash', `the QuickJS worker failed: ${error.message}`)
    const onExit = (code: number) => reports.failed('crash', `the QuickJS worker exited unexpectedly (code ${code})`)
    const listeners = Object.entries({ message: onMessage, error: onError, exit: onExit })
    for (const [event, listener] of listeners) worker.on(event, listener)
    worker.ref()
    worker.postMessage({
      t: 'run',
      id,
      code: request.code,
      tools: request.tools,
      outputBytes: limits.outputBytes,
      bufferBytes: limits.memoryMb * MB,
      argumentBytes: argumentBytes(limits),
      maxPendingCalls,
      memoryMessage: limitMessages.memory(limits),
      recorded: request.values && JSON.stringify(request.values.replay),
    })
    return {
      deliver(call, reply) {
        if (replies.push(reply.ok ? [call, true, reply.value] : [call, false, reply.message, reply.code]) === 1) queueMicrotask(send)
      },
      // the thread's active time (waiting for a reply is idle), less what it spent making this run's context or the next
      cpuUsed: () => worker.performance.eventLoopUtilization(elu).active - (setupMs[0] - setupBefore),
      end() {
        for (const [event, listener] of listeners) worker.off(event, listener)
        worker.unref()
      },
    }
  },
}
