// the process tier: a driver (contract.ts) whose units live in a child process (process-child.mjs, which serves a backend's
// driver), so that what V8 cannot contain in a thread or an isolate (a fatal out-of-memory) ends that process, not the host.
// over the ipc channel, host → child: ['init', module, exportName, options] · ['create', unit, memoryMb] ·
// ['start', unit, run, started] · ['reply', run, call, reply] · ['cpu', run] · ['end', run, reuse] · ['dispose', unit].
// child → host: ['ready'] · ['failed', message] · ['made', unit] · ['unmade', unit, message] · ['lost', unit] ·
// ['disposed', unit] · [run, kind, a, b, c, d] (a report) · ['cpu', run, ms | null] · ['retire']

import { type ChildProcess, fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { limitMessages } from './budgets.mjs'
import { type Program, type ProgramHandle, type ProgramReports, report, type SandboxDriver, type Unit } from './contract.ts'
import { type PoolOptions, SandboxPool } from './pool.ts'
import type { CodeRunLimits } from './types.ts'

const entry = fileURLToPath(new URL('./process-child.mjs', import.meta.url))

/** the backend a sandbox process runs: the URL of the module that exports its driver (a driver, or a class made with its options) */
export interface ProcessBackend {
  module: string
  exportName: string
  name: string
  /** node flags the sandbox process needs for it (isolated-vm's `--no-node-snapshot`) */
  execArgv?: string[]
}

export interface ProcessSandboxOptions extends PoolOptions {
  backend: ProcessBackend
  /** handed to the backend's driver when set (WorkerSandboxOptions.spinMs) */
  spinMs?: number
}

interface ProcessUnit extends Unit {
  id: number
  child: Child
  lost: () => void
}

interface Active {
  reports: ProgramReports
  limits: CodeRunLimits
  /** answers the cpu reading asked for (the pool asks for one at a time) */
  cpu?: (ms: number | undefined) => void
}

/** a sandbox process, as the host tracks it */
class Child {
  readonly units = new Map<number, ProcessUnit>()
  readonly making = new Map<number, { memoryMb: number; lost: () => void; resolve: (unit: ProcessUnit) => void; reject: (error: Error) => void }>()
  outbox: unknown[][] = []
  /** units it was told to dispose, until it says it did: a backstop timer each */
  readonly disposing = new Map<number, NodeJS.Timeout>()
  readonly runs = new Map<number, Active>()
  seq = 0
  /** runs and units being made: while any, it is referenced */
  holds = 0
  /** the end of what it wrote to stderr: V8 says there why it aborted */
  stderr = ''
  /** it asked to be replaced, or was found unfit: no new unit is made in it, and its units serve no more runs */
  retiring = false
  exited = false
  /** why what it sent was no message a sandbox process may send: it was ended for it */
  malformed?: string

  constructor(
    readonly process: ChildProcess,
    /** resolves with the reason it could not start, or undefined once it serves */
    readonly ready: Promise<string | undefined>,
  ) {}
}

// a healthy child of a closed sandbox waits here for the next sandbox with the same configuration: deployments and tests
// that start one after another do not pay a process start each
const spares = new Map<string, { child: Child; timer: NodeJS.Timeout }>()
const spareMs = 10_000

const outOfMemory = /out of memory|allocation failed|CALL_AND_RETRY_LAST|is_heap_oom/i
// how long past its runs' cpuMs a sandbox process may take to answer a disposal (its main thread runs no program, but
// may be slow to get a core on a loaded machine)
const disposeMs = 2000

const isId = (value: unknown): value is number => Number.isSafeInteger(value)

/** a CodeRuntime whose programs run in the units of a supervised child process, replaced after it died */
export class ProcessSandbox extends SandboxPool<ProcessUnit> {
  declare protected readonly driver: ProcessDriver

  constructor(options: ProcessSandboxOptions) {
    super(new ProcessDriver(options), options)
  }

  /** sandbox processes started so far, the first included */
  get started() {
    return this.driver.started
  }

  /** the sandbox process now serving runs, for diagnostics */
  get pid(): number | undefined {
    const child = this.driver.child
    return child && !child.exited ? child.process.pid : undefined
  }
}

class ProcessDriver implements SandboxDriver<ProcessUnit> {
  readonly backend: string
  readonly createFailure = 'the sandbox process could not start'
  child: Child | undefined
  started = 0
  private key: string
  private init: ['init', string, string, Record<string, unknown>]
  private execArgv: string[]

  constructor(options: ProcessSandboxOptions) {
    this.backend = options.backend.name
    const inner = options.spinMs === undefined ? {} : { spinMs: options.spinMs }
    this.init = ['init', options.backend.module, options.backend.exportName, inner]
    this.execArgv = options.backend.execArgv ?? []
    this.key = JSON.stringify([this.init, this.execArgv])
    const spare = spares.get(this.key)
    if (spare && !spare.child.exited) {
      clearTimeout(spare.timer)
      spares.delete(this.key)
      this.child = spare.child
    }
  }

  async create(memoryMb: number, lost: () => void, again = true): Promise<ProcessUnit> {
    if (!this.child || this.child.exited || this.child.retiring) this.child = this.spawn()
    const child = this.child
    this.hold(child, 1)
    try {
      const problem = await child.ready
      if (problem !== undefined) throw new Error(problem)
      const id = ++child.seq
      const made = new Promise<ProcessUnit>((resolve, reject) => child.making.set(id, { memoryMb, lost, resolve, reject }))
      this.send(child, ['create', id, memoryMb])
      const unit = await made
      if (!again || !child.retiring) return unit
      this.dispose(unit)
    } catch (error) {
      if (!again || !child.exited || (await child.ready) !== undefined) throw error
    } finally {
      this.hold(child, -1)
    }
    // the process was lost or is to be replaced (another program's out-of-memory) while the unit was being made: the unit
    // is made in its replacement, once
    return await this.create(memoryMb, lost, false)
  }

  start(unit: ProcessUnit, { request, limits, source }: Program, reports: ProgramReports): ProgramHandle {
    const { child } = unit
    const id = ++child.seq
    const active: Active = { reports, limits }
    const handle: ProgramHandle = {
      deliver: (call, reply) => this.send(child, ['reply', id, call, reply]),
      cpuUsed: () => {
        if (!child.runs.has(id)) return undefined
        this.send(child, ['cpu', id])
        return new Promise((resolve) => (active.cpu = resolve))
      },
      end: (reuse) => {
        if (!this.forget(child, id)) return
        this.send(child, ['end', id, reuse && !child.retiring])
      },
    }
    if (child.exited) {
      queueMicrotask(() => reports.failed('crash', 'the sandbox process exited before the run started; run it again'))
      return handle
    }
    child.runs.set(id, active)
    this.hold(child, 1)
    const started = { code: request.code, source, tools: [...request.tools], limits }
    this.send(child, ['start', unit.id, id, request.values ? { ...started, replay: [...request.values.replay] } : started])
    return handle
  }

  dispose(unit: ProcessUnit) {
    const { child } = unit
    if (!child.units.delete(unit.id) || child.exited) return
    this.send(child, ['dispose', unit.id])
    // later than its runs' cpuMs and disposeMs more, it is not trusted
    const stepMs = Math.max(0, ...[...child.runs.values()].map(({ limits }) => limits.cpuMs))
    const backstop = setTimeout(() => this.retire(child, 'did not answer'), stepMs + disposeMs)
    backstop.unref()
    child.disposing.set(unit.id, backstop)
  }

  /** the sandbox closed: its process ends, or, healthy and idle, waits a moment for the next sandbox like this one */
  close(busy: boolean) {
    const child = this.child
    this.child = undefined
    if (!child) return
    if (busy || child.exited || child.retiring || child.runs.size > 0 || spares.has(this.key)) return this.kill(child)
    void child.ready.then((problem) => {
      if (problem !== undefined || child.exited) return this.kill(child)
      const timer = setTimeout(() => {
        spares.delete(this.key)
        this.kill(child)
      }, spareMs)
      timer.unref()
      spares.set(this.key, { child, timer })
    })
  }

  // false once the run was already forgotten
  private forget(child: Child, id: number) {
    const active = child.runs.get(id)
    if (!active) return false
    child.runs.delete(id)
    active.cpu?.(undefined)
    this.hold(child, -1)
    if (child.runs.size === 0 && child.retiring) this.kill(child)
    return true
  }

  // what the process sent in one turn: a message, or a list of them (one level: a list in a list is malformed)
  private onMessage(child: Child, received: unknown) {
    const list = Array.isArray(received) && Array.isArray(received[0]) ? received : [received]
    for (const message of list) {
      if (child.malformed || child.exited) return
      const problem = this.take(child, message)
      if (problem === undefined) continue
      child.malformed = problem
      this.retire(child, `sent a malformed message (${problem})`)
    }
  }

  // what the process sent, acted on, or why no sandbox process may send it: after an escape from the sandbox inside it,
  // the program is who speaks
  private take(child: Child, message: unknown): string | undefined {
    if (!Array.isArray(message)) return 'not a list'
    const [kind, a, b, c, d, e] = message as unknown[]
    if (isId(kind)) {
      const active = child.runs.get(kind)
      // a run that ended here (the host's budget ended it): dropped, as any report after an end
      if (!active) return
      const { reports } = active
      const before = reports.ended()
      const taken = report(reports, a, b, c, d, e)
      if (!taken && !before && !reports.ended()) return `a malformed ${typeof a === 'string' && a.length < 20 ? a : 'report'}`
      return
    }
    switch (kind) {
      case 'made':
      case 'unmade': {
        const making = isId(a) ? child.making.get(a) : undefined
        if (!making) return `a ${kind} of no unit being made`
        child.making.delete(a as number)
        if (kind === 'unmade') return void making.reject(new Error(typeof b === 'string' ? b : 'the unit could not be made'))
        const unit: ProcessUnit = { id: a as number, child, memoryMb: making.memoryMb, runs: 0, lost: making.lost }
        child.units.set(unit.id, unit)
        return void making.resolve(unit)
      }
      case 'disposed':
        if (!isId(a)) return 'a malformed disposal'
        clearTimeout(child.disposing.get(a))
        return void child.disposing.delete(a)
      case 'lost':
        if (!isId(a)) return 'a malformed loss'
        return void child.units.get(a)?.lost()
      case 'cpu':
        // ms spent (json has no Infinity or NaN), or null for none
        if (!isId(a) || !(b === null || typeof b === 'number')) return 'a malformed cpu reading'
        return void child.runs.get(a)?.cpu?.(b ?? undefined)
      case 'retire':
        child.retiring = true
        // its units leave the pool (those out on runs once back) for new ones in a new process; it ends once its runs did
        for (const unit of [...child.units.values()]) unit.lost()
        if (child.runs.size === 0) this.kill(child)
        return
    }
    return 'a message of no known kind'
  }

  private spawn(): Child {
    this.started++
    const proc = fork(entry, [], {
      // nothing of the host's environment or flags: the child needs none, and a program must not learn them
      env: {},
      execArgv: this.execArgv,
      // stdout and stderr are read and never forwarded: the host's stdout may carry a protocol (MCP over stdio)
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'json',
    })
    let ready!: (problem: string | undefined) => void
    const child = new Child(proc, new Promise((resolve) => (ready = resolve)))
    proc.stdout?.resume()
    proc.stderr?.setEncoding('utf8')
    proc.stderr?.on('data', (chunk: string) => (child.stderr = (child.stderr + chunk).slice(-4096)))
    const starting = (message: unknown) => {
      if (!Array.isArray(message)) return
      if (message[0] === 'ready') ready(undefined)
      else if (message[0] === 'failed') ready(typeof message[1] === 'string' ? message[1] : 'it failed to start')
    }
    proc.on('message', starting)
    void child.ready.then(() => {
      proc.off('message', starting)
      proc.on('message', (message: unknown) => this.onMessage(child, message))
    })
    proc.once('exit', (code, signal) => {
      child.exited = true
      for (const timer of child.disposing.values()) clearTimeout(timer)
      ready(`it exited (${signal ?? `code ${code}`}) while starting${child.stderr ? `: ${child.stderr.trim().split('\n').pop()}` : ''}`)
      this.died(child, signal ?? `code ${code}`)
    })
    // a failed spawn or a closed channel: the exit handler reports what matters
    proc.on('error', () => {})
    this.send(child, this.init)
    this.hold(child, 0)
    return child
  }

  private died(child: Child, how: string) {
    const oom = outOfMemory.test(child.stderr)
    for (const [id, { limits, reports }] of [...child.runs]) {
      const alone = child.runs.size === 1
      this.forget(child, id)
      if (child.malformed) {
        reports.failed('crash', `the sandbox process sent a malformed message (${child.malformed}); it was ended and a new one started`)
      } else if (oom) {
        const others = alone ? '' : '; other programs running in the same process were ended with it'
        reports.failed('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the sandbox's limit and ended the sandbox process${others}`)
      } else {
        reports.failed('crash', `the sandbox process exited unexpectedly (${how}); a new one was started`)
      }
    }
    const problem = `it exited (${how})${child.stderr ? `: ${child.stderr.trim().split('\n').pop()}` : ''}`
    for (const { reject } of child.making.values()) reject(new Error(problem))
    child.making.clear()
    // its idle units leave the pool, which makes new ones in a new process off the path of the next run
    for (const unit of [...child.units.values()]) unit.lost()
    child.units.clear()
    if (this.child === child) this.child = undefined
  }

  private retire(child: Child, why: string) {
    child.retiring = true
    child.stderr += `\nthe sandbox process ${why}`
    this.kill(child)
  }

  private kill(child: Child) {
    if (!child.exited) child.process.kill('SIGKILL')
  }

  // what the host sends a process in one turn goes as one message, a list of them (a fan-out's replies together)
  private send(child: Child, message: unknown[]) {
    if (child.outbox.push(message) > 1) return
    process.nextTick(() => {
      const list = child.outbox
      child.outbox = []
      if (child.exited || !child.process.connected) return
      try {
        child.process.send(list.length === 1 ? list[0] : list)
      } catch {}
    })
  }

  // a child with runs or units being made keeps the host alive until they settle; an idle one does not
  private hold(child: Child, change: number) {
    child.holds += change
    const method = child.holds > 0 ? 'ref' : 'unref'
    const proc = child.process
    for (const handle of [proc, proc.channel, proc.stdout, proc.stderr] as ({ ref?(): void; unref?(): void } | null | undefined)[]) handle?.[method]?.()
  }
}
