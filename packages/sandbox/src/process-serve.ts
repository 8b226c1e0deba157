// the inside of a sandbox process: one in-process CodeRuntime (the worker or the isolate backend), driven over the ipc
// channel by ProcessSandbox in the host. it holds no secrets and writes nothing to stdout or stderr of its own.

import { messageOf, siteNumber } from './outcome.ts'
import type { BridgeReply, CallSite, CodeRunLimits, CodeRunOutcome, CodeRuntime, WaitSignal } from './types.ts'

export type HostMessage =
  | { t: 'init'; module: string; exportName: string; options: Record<string, unknown> }
  | { t: 'run'; id: number; code: string; tools: string[]; limits: CodeRunLimits; waiting: boolean; replay?: number[] }
  | { t: 'reply'; id: number; call: number; reply: BridgeReply }
  /** the program starts or stops waiting on a person: its wall clock stops meanwhile */
  | { t: 'wait'; id: number; waiting: boolean }
  | { t: 'abort'; id: number }
  /** a liveness check: the main thread answers it with `pong` as soon as it turns its event loop */
  | { t: 'ping'; n: number }

export type ChildMessage =
  | { t: 'ready' }
  | { t: 'failed'; message: string }
  /** `site`: where the program made the call, as the prelude numbers it (see RunBridge.call) */
  | { t: 'call'; id: number; call: number; name: string; json: string; site?: number }
  | { t: 'done'; id: number; outcome: CodeRunOutcome; retire: boolean }
  | { t: 'pong'; n: number }
  /** clock readings and random numbers the run's program read (its request records them) */
  | { t: 'values'; id: number; values: number[] }
  /**
   * a step of the run's program starts on the main thread (a reply delivered, and what the program then runs), while
   * this process runs more than one program: until the next message, it is what computes there. with one program
   * running, that one is, and nothing is sent
   */
  | { t: 'step'; id: number }

interface Served extends CodeRuntime {
  /** resolves once its pool is warm */
  ready?(): Promise<void>
  /** isolates parked by V8's out-of-memory handler: their memory is lost, so the process should be replaced */
  parked?: number
}

const send = (message: ChildMessage) => process.send?.(message)
const runs = new Map<number, { controller: AbortController; calls: Map<number, (reply: BridgeReply) => void>; waits: Waits }>()
let runtime: Served | undefined
let calls = 0
// each run's id, by the signal its request carries (what a backend hands back to `stepped`)
const ids = new WeakMap<AbortSignal, number>()

async function init(message: Extract<HostMessage, { t: 'init' }>) {
  try {
    const module = (await import(message.module)) as Record<string, new (options: unknown) => Served>
    // this process is one the host survives losing: a backend may run programs on its main thread (the isolate backend
    // drives them from it after their first tool call), where a host must not. an out-of-memory there parks the thread
    // in the middle of a step: `onStep` tells the host, before each step, which program's it is
    const onStep = (request: { signal: AbortSignal }) => {
      const id = runs.size > 1 ? ids.get(request.signal) : undefined
      if (id !== undefined) send({ t: 'step', id })
    }
    runtime = new module[message.exportName]({ ...message.options, disposableThread: true, onStep })
    // the host's first run waits for this message: it then finds a warm pool
    await runtime.ready?.()
    send({ t: 'ready' })
  } catch (error) {
    // messageOf, because a backend may throw what String() cannot read (a value with no prototype): this process would
    // then die of the rejection and the host learn only that it exited
    send({ t: 'failed', message: messageOf(error) })
  }
}

// the host's word on whether a run waits on a person, for the backend here
class Waits implements WaitSignal {
  private listeners = new Set<(waiting: boolean) => void>()

  constructor(public waiting: boolean) {}

  watch(listener: (waiting: boolean) => void) {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  set(waiting: boolean) {
    if (waiting === this.waiting) return
    this.waiting = waiting
    for (const listener of [...this.listeners]) listener(waiting)
  }
}

async function run({ id, code, tools, limits, waiting, replay }: Extract<HostMessage, { t: 'run' }>) {
  const controller = new AbortController()
  const pending = new Map<number, (reply: BridgeReply) => void>()
  const waits = new Waits(waiting === true)
  runs.set(id, { controller, calls: pending, waits })
  ids.set(controller.signal, id)
  const call = (name: string, json: string, at?: CallSite) =>
    new Promise<BridgeReply>((resolve) => {
      const call = ++calls
      pending.set(call, resolve)
      send({ t: 'call', id, call, name, json, ...(at ? { site: siteNumber(at) } : {}) })
    })
  let outcome: CodeRunOutcome
  try {
    const values = Array.isArray(replay) ? { replay, record: (values: readonly number[]) => send({ t: 'values', id, values: [...values] }) } : undefined
    outcome = await runtime!.run({ code, tools, call, signal: controller.signal, limits, waits, values })
  } catch (error) {
    // as in init: a message that cannot be read must not take this process, and every run in it, down
    outcome = { ok: false, kind: 'crash', message: messageOf(error), logs: [] }
  }
  runs.delete(id)
  send({ t: 'done', id, outcome, retire: (runtime?.parked ?? 0) > 0 })
}

process.on('message', (message: HostMessage) => {
  switch (message.t) {
    case 'init':
      return void init(message)
    case 'run':
      return void run(message)
    case 'reply': {
      const resolve = runs.get(message.id)?.calls.get(message.call)
      runs.get(message.id)?.calls.delete(message.call)
      return resolve?.(message.reply)
    }
    case 'abort':
      return runs.get(message.id)?.controller.abort()
    case 'wait':
      return runs.get(message.id)?.waits.set(message.waiting === true)
    case 'ping':
      return void send({ t: 'pong', n: message.n })
  }
})
// the host is gone: nothing here may outlive it
process.on('disconnect', () => process.exit(0))
