// the process-isolated tier: the worker or isolate backend runs inside a child process, so that whatever V8 cannot
// contain in a thread or an isolate (a fatal out-of-memory aborts the whole process) ends that process, not the host.
// the host keeps the cap, the bridge to the tools and a supervisor that replaces a child that died.

import { type ChildProcess, fork } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { RunBridge } from './bridge.ts'
import { failure, limitMessages } from './outcome.ts'
import { type GatedOptions, GatedRuntime, warmUp } from './pool.ts'
import type { ChildMessage, HostMessage } from './process-serve.ts'
import type { CodeRunLimits, CodeRunOutcome, CodeRunRequest, RecordedValues } from './types.ts'
import { WallClock } from './wall.ts'

const entry = fileURLToPath(new URL('./process-child.mjs', import.meta.url))

export interface ProcessSandboxOptions extends GatedOptions {
  /** the in-process backend the sandbox process runs: the URL of its module and the name of the class it exports */
  backend: { module: string; exportName: string; name: string }
  /** workers or isolates the sandbox process keeps waiting */
  poolSize?: number
  /** the worker backend's hand-off spin (WorkerSandboxOptions.spinMs), handed to the backend when set */
  spinMs?: number
}

interface Active {
  /** the host's side of the run's bridge: it checks each call the process forwards again, and bounds the reply */
  bridge: RunBridge
  limits: CodeRunLimits
  /** the process forwarded a call of this run: it started the run, and may drive its program on its main thread */
  called: boolean
  /** the run's recorded clock readings and random numbers, when its request records them */
  values: RecordedValues | undefined
  settle(outcome: CodeRunOutcome): void
}

interface Child {
  /** the sandbox it serves now: a spare changes hands */
  owner: ProcessSandbox
  process: ChildProcess
  /** resolves with the reason it could not start, or undefined once it serves runs */
  ready: Promise<string | undefined>
  runs: Map<number, Active>
  /** the end of what it wrote to stderr: V8 says there why it aborted */
  stderr: string
  /** it asked to be replaced (an isolate's thread was parked): no new runs go to it */
  retiring: boolean
  exited: boolean
  /** it got as far as serving runs: one that died starting is not restarted in a loop */
  served: boolean
  /** what it sent that no sandbox process may send: it was ended for it */
  malformed?: string
  /** V8 out-of-memory reports seen on its stderr so far */
  reports: number
  /** the liveness check started by such a report, while it waits for the main thread's answer */
  probe?: NodeJS.Timeout
  pings: number
  /** the run whose step it said starts on its main thread ('step'), until its next message of any kind */
  stepping?: number
  /** its main thread was found parked by V8's out-of-memory handler: the run thought to have bombed, if one is */
  parked?: { culprit: number | undefined }
}

// a healthy child of a closed sandbox waits here a little for the next sandbox with the same configuration:
// deployments and tests that start one after another do not pay a process start each
const spares = new Map<string, { child: Child; timer: NodeJS.Timeout }>()
const spareMs = 10_000

const outOfMemory = /out of memory|allocation failed|CALL_AND_RETRY_LAST|is_heap_oom/i
// V8 prints this header, from native code, only on its fatal out-of-memory path, just before its handler runs (which,
// with isolated-vm's handler installed, parks the thread that ran the isolate). programs' output never reaches the
// sandbox process's stderr (it goes to the host over the bridge), so a program cannot print it; and a report only starts
// a liveness check, so one forged after an escape kills nothing while the main thread answers
const gcReport = '<--- Last few GCs --->'
// the liveness check: how often it looks, and how long the main thread must stay silent and idle to be taken as parked
const probeEveryMs = 250
const parkedAfterMs = 2000

/** CPU time of the process's main thread in clock ticks (/proc, Linux), or undefined where it cannot be read */
function mainThreadTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8')
    // the fields after the command, which is in parentheses and may hold spaces
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the command
    const ticks = Number(fields[11]) + Number(fields[12])
    return Number.isFinite(ticks) ? ticks : undefined
  } catch {
    return undefined
  }
}

const KINDS: readonly unknown[] = ['exception', 'timeout', 'memory', 'output-limit', 'abort', 'crash']
const isStrings = (value: unknown): value is string[] => Array.isArray(value) && value.every((item) => typeof item === 'string')
const isPosition = (value: unknown) => value === undefined || Number.isSafeInteger(value)

/**
 * why a message from the sandbox process is not one it may send, or undefined. the process runs programs: after an
 * escape from the sandbox inside it, the program is who speaks, so what it says is data, checked before it is used.
 * an outcome may hold no more than `outputBytes` allow (a utf-16 unit is at least one utf-8 byte)
 */
function malformed(message: unknown, runs: ReadonlyMap<number, Active>): string | undefined {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return 'not an object'
  const m = message as Record<string, unknown>
  switch (m.t) {
    case 'ready':
      return
    case 'pong':
      return typeof m.n === 'number' ? undefined : 'a malformed pong'
    case 'failed':
      return typeof m.message === 'string' ? undefined : 'a start failure without a message'
    case 'step':
      return typeof m.id === 'number' ? undefined : 'a malformed step'
    case 'values':
      return typeof m.id === 'number' && Array.isArray(m.values) && m.values.every((value) => typeof value === 'number') ? undefined : 'malformed values'
    case 'call':
      if (typeof m.id !== 'number' || typeof m.call !== 'number' || typeof m.name !== 'string' || typeof m.json !== 'string') return 'a malformed call'
      if (m.site !== undefined && typeof m.site !== 'number') return 'a malformed call site'
      return
    case 'done': {
      const outcome = m.outcome as Record<string, unknown> | null
      if (typeof m.id !== 'number' || typeof outcome !== 'object' || outcome === null || !isStrings(outcome.logs)) return 'a malformed outcome'
      if (outcome.ok === true ? !(outcome.result === undefined || typeof outcome.result === 'string') : outcome.ok !== false) return 'a malformed outcome'
      if (
        outcome.ok === false &&
        !(KINDS.includes(outcome.kind) && typeof outcome.message === 'string' && isPosition(outcome.line) && isPosition(outcome.column))
      )
        return 'a malformed outcome'
      const limits = runs.get(m.id)?.limits
      const printed = (outcome.logs as string[]).reduce((sum, line) => sum + line.length, 0) + ((outcome.result as string | undefined)?.length ?? 0)
      if (limits && printed > limits.outputBytes) return 'an outcome larger than outputBytes'
      return
    }
  }
  return 'a message of no known kind'
}

/**
 * a CodeRuntime whose programs run in a supervised child process. what it adds to the in-process backend inside it:
 * a host that survives anything a program does to that process, and a fresh process after it died.
 */
export class ProcessSandbox extends GatedRuntime {
  readonly backend: string
  /** sandbox processes started so far, the first included */
  started = 0
  private child: Child | undefined
  private seq = 0
  private key: string
  private init: Extract<HostMessage, { t: 'init' }>
  // the first child is spawned on the turn after construction: spawning is synchronous (until the child's exec, several
  // ms and more on a busy machine), and a deployment's ctx.start() need not wait for it
  private spawning: NodeJS.Immediate | undefined

  constructor(options: ProcessSandboxOptions) {
    super(options)
    this.backend = options.backend.name
    const inner = {
      poolSize: options.poolSize ?? 2,
      limits: this.limits,
      maxConcurrent: this.gate.maxConcurrent,
      ...(options.spinMs === undefined ? {} : { spinMs: options.spinMs }),
    }
    this.init = { t: 'init', module: options.backend.module, exportName: options.backend.exportName, options: inner }
    this.key = JSON.stringify(this.init)
    const spare = spares.get(this.key)
    if (spare && !spare.child.exited) {
      clearTimeout(spare.timer)
      spares.delete(this.key)
      this.child = spare.child
      spare.child.owner = this
    } else {
      this.spawning = setImmediate(() => this.spawnNow())
    }
  }

  protected async admit(request: CodeRunRequest, limits: CodeRunLimits): Promise<CodeRunOutcome> {
    this.spawnNow()
    if (!this.child || this.child.exited || this.child.retiring) this.child = this.spawn()
    const child = this.child
    this.busy(child)
    const problem = await child.ready
    if (child.runs.size === 0) this.idle(child)
    if (problem !== undefined) {
      if (this.child === child) this.child = undefined
      return failure('crash', `the sandbox process could not start: ${problem}`)
    }
    if (this.closed) return failure('abort', 'the sandbox was closed before the run started')
    if (request.signal.aborted) return failure('abort', 'the run was aborted before it started')
    if (child.exited) return failure('crash', 'the sandbox process exited before the run started; run it again')
    return await this.execute(child, request, limits)
  }

  /** resolves once the sandbox process serves runs from a warm pool (or could not start) */
  async ready(): Promise<void> {
    // the first child is spawned on its turn (the constructor's immediate runs before this one): a service asks at once
    if (this.spawning) await new Promise((resolve) => setImmediate(resolve))
    const child = this.child
    if (!child) return
    // an idle child keeps the host alive no more than a run in it does: a host awaiting only this would otherwise end
    // with an unsettled top-level await (exit code 13) while the child starts
    this.busy(child)
    try {
      await child.ready
    } finally {
      if (child.runs.size === 0) this.idle(child)
    }
  }

  /** the process id of the sandbox process now serving runs, for diagnostics */
  get pid(): number | undefined {
    return this.child?.exited ? undefined : this.child?.process.pid
  }

  /** ends the sandbox process (or keeps it a moment for the next sandbox like this one); runs in progress end with `abort` */
  async close() {
    if (this.closed) return
    this.closed = true
    clearImmediate(this.spawning)
    this.spawning = undefined
    this.gate.drain()
    const child = this.child
    this.child = undefined
    if (!child) return
    const busy = child.runs.size > 0
    for (const active of [...child.runs.values()]) active.settle(failure('abort', 'the sandbox was closed during the run'))
    if (busy || child.exited || child.retiring || spares.has(this.key) || (await child.ready) !== undefined) return this.kill(child)
    const timer = setTimeout(() => {
      spares.delete(this.key)
      this.kill(child)
    }, spareMs)
    timer.unref()
    spares.set(this.key, { child, timer })
  }

  // the first child, if it is still to be spawned
  private spawnNow() {
    if (this.spawning === undefined) return
    clearImmediate(this.spawning)
    this.spawning = undefined
    if (!this.closed && !this.child) this.child = this.spawn()
  }

  private execute(child: Child, request: CodeRunRequest, limits: CodeRunLimits) {
    const id = ++this.seq
    return new Promise<CodeRunOutcome>((resolve) => {
      let settled = false
      let backstop: NodeJS.Timeout | undefined
      let unwatch: (() => void) | undefined
      const onAbort = () => {
        this.send(child, { t: 'abort', id })
        // the process answers an abort at once; one that does not is not trusted with another run
        backstop = setTimeout(() => this.retire(child, 'did not answer an abort'), 2000)
      }
      const settle = (outcome: CodeRunOutcome) => {
        if (!child.runs.delete(id)) return
        settled = true
        clearTimeout(backstop)
        wall.end()
        unwatch?.()
        request.signal.removeEventListener('abort', onAbort)
        if (child.runs.size === 0) {
          this.idle(child)
          // a process that ended every run answered: a liveness check still waiting would keep the host up for nothing
          this.endProbe(child)
        }
        resolve(outcome)
      }
      // what the process forwards is checked again here, as the in-process bridge checks what a program asks for: a call
      // past the budgets ends the run, and the process is told to end it too
      const bridge = new RunBridge(
        request,
        limits,
        () => settled,
        (kind, message) => {
          this.send(child, { t: 'abort', id })
          settle(failure(kind, message))
        },
        (call, reply) => this.send(child, { t: 'reply', id, call, reply }),
      )
      // the backend inside keeps the wall-clock budget; this only catches a process that stopped answering. both stop
      // while the program waits on a person: the process is told each change
      const wall = new WallClock(limits.wallMs + 5000, () => this.retire(child, 'stopped answering'))
      child.runs.set(id, { bridge, limits, settle, called: false, values: request.values })
      this.busy(child)
      request.signal.addEventListener('abort', onAbort, { once: true })
      this.send(child, {
        t: 'run',
        id,
        code: request.code,
        tools: [...request.tools],
        limits,
        waiting: request.waits?.waiting === true,
        ...(request.values ? { replay: [...request.values.replay] } : {}),
      })
      wall.start(request.waits)
      unwatch = request.waits?.watch((waiting) => this.send(child, { t: 'wait', id, waiting }))
    })
  }

  private onMessage(child: Child, received: unknown) {
    if (child.malformed) return
    const problem = malformed(received, child.runs)
    if (problem) {
      child.malformed = problem
      return this.retire(child, `sent a malformed message (${problem})`)
    }
    const message = received as ChildMessage
    // the main thread sends nothing while a step runs: any message means the step it announced ended
    child.stepping = undefined
    switch (message.t) {
      case 'call': {
        const active = child.runs.get(message.id)
        if (active) active.called = true
        return active?.bridge.call(message.call, message.name, message.json, message.site)
      }
      case 'step':
        child.stepping = message.id
        return
      case 'values':
        return child.runs.get(message.id)?.values?.record(message.values)
      case 'pong':
        if (message.n === child.pings) this.endProbe(child)
        return
      case 'done':
        if (message.retire) child.retiring = true
        child.runs.get(message.id)?.settle(message.outcome)
        if (child.retiring && child.runs.size === 0) this.kill(child)
        return
    }
  }

  private spawn(): Child {
    this.started++
    const proc = fork(entry, [], {
      // nothing of the host's environment or flags: the child needs none, and a program must not learn them
      env: {},
      execArgv: ['--no-node-snapshot'],
      // stdout and stderr are read and never forwarded: the host's stdout may carry a protocol (MCP over stdio)
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'json',
    })
    let ready!: (problem: string | undefined) => void
    const child: Child = {
      owner: this,
      process: proc,
      ready: new Promise((resolve) => (ready = resolve)),
      runs: new Map(),
      stderr: '',
      retiring: false,
      exited: false,
      served: false,
      reports: 0,
      pings: 0,
    }
    proc.stdout?.resume()
    proc.stderr?.setEncoding('utf8')
    proc.stderr?.on('data', (chunk: string) => {
      // a report split across chunks is found whole once: what is carried over is too short to hold one
      const seen = (child.stderr.slice(1 - gcReport.length) + chunk).split(gcReport).length - 1
      child.stderr = (child.stderr + chunk).slice(-4096)
      if (seen > 0) {
        child.reports += seen
        child.owner.startProbe(child)
      }
    })
    const starting = (message: unknown) => {
      if (malformed(message, child.runs)) return
      const { t } = message as ChildMessage
      if (t === 'ready') {
        child.served = true
        // one trivial run with a tool call before programs get the process, as the pool warms each unit: the first
        // program finds this tier's side warm too (the run path here, the ipc both ways, the process serving it)
        void this.execute(child, warmUp(), this.limits).then(() => ready(undefined))
      } else if (t === 'failed') ready((message as { message: string }).message)
    }
    proc.on('message', starting)
    proc.on('message', (message: unknown) => child.owner.onMessage(child, message))
    proc.once('exit', (code, signal) => {
      child.exited = true
      this.endProbe(child)
      ready(`it exited (${signal ?? `code ${code}`}) while starting${child.stderr ? `: ${child.stderr.trim().split('\n').pop()}` : ''}`)
      child.owner.died(child, code, signal)
    })
    // an error here is a failed spawn or a closed channel; the exit handler reports what matters
    proc.on('error', () => {})
    void child.ready.then(() => proc.off('message', starting))
    this.send(child, this.init)
    this.idle(child)
    return child
  }

  private died(child: Child, code: number | null, signal: NodeJS.Signals | null) {
    const oom = outOfMemory.test(child.stderr)
    const how = signal ?? `code ${code}`
    for (const [id, active] of [...child.runs.entries()]) {
      const { limits } = active
      if (child.malformed) {
        active.settle(failure('crash', `the sandbox process sent a malformed message (${child.malformed}); it was ended and a new one started`))
      } else if (child.parked) {
        const mine = child.parked.culprit === undefined ? child.runs.size === 1 : child.parked.culprit === id
        active.settle(
          mine
            ? failure(
                'memory',
                `${limitMessages.memory(limits)}: V8 ran out of memory outside the sandbox's limit and parked the sandbox process; it was ended and a new one started`,
              )
            : failure('crash', "the sandbox process was lost to another program's out-of-memory; it was ended and a new one started; run it again"),
        )
      } else if (oom) {
        const others = child.runs.size > 1 ? '; other programs running in the same process were ended with it' : ''
        active.settle(
          failure('memory', `${limitMessages.memory(limits)}: V8 ran out of memory outside the sandbox's limit and ended the sandbox process${others}`),
        )
      } else {
        active.settle(failure('crash', `the sandbox process exited unexpectedly (${how}); a new one was started`))
      }
    }
    // replaced at once, off the path of the next run; one that never started is left to the next run to retry
    if (this.child === child) this.child = this.closed || !child.served ? undefined : this.spawn()
  }

  /**
   * V8 reported an out-of-memory in the sandbox process: its handler parked the thread that ran the isolate. a pool
   * thread's loss the backend reports itself (the run ends memory, the process is retired once idle); the main
   * thread's (a program driven from it after its first tool call) leaves the process unable to answer anything. so
   * the main thread is asked for a pong: one that neither answers nor spends CPU for parkedAfterMs is parked (a
   * healthy thread busy with a program's step spends CPU, and answers once the step ends). where the thread's CPU time
   * cannot be read, it is taken as parked once every run's step could have used up its cpuMs
   */
  private startProbe(child: Child) {
    if (child.probe || child.exited || child.parked || child.runs.size === 0) return
    const n = ++child.pings
    this.send(child, { t: 'ping', n })
    const began = Date.now()
    const pid = child.process.pid ?? 0
    const cpuBound = Math.max(...[...child.runs.values()].map(({ limits }) => limits.cpuMs)) + parkedAfterMs
    // (time, ticks) readings, the oldest first
    const seen: [number, number | undefined][] = [[began, mainThreadTicks(pid)]]
    child.probe = setInterval(() => {
      if (child.exited || child.runs.size === 0) return this.endProbe(child)
      const now = Date.now()
      const ticks = mainThreadTicks(pid)
      seen.push([now, ticks])
      while (seen.length > 1 && now - seen[1][0] >= parkedAfterMs) seen.shift()
      const [then, before] = seen[0]
      const idle = ticks !== undefined && before !== undefined ? now - then >= parkedAfterMs && ticks === before : now - began >= cpuBound
      if (idle) this.parkedMain(child)
    }, probeEveryMs)
  }

  private endProbe(child: Child) {
    clearInterval(child.probe)
    child.probe = undefined
  }

  // the program on the main thread when it was parked: the one whose step the process announced last, if nothing came
  // after; else (it announces none while it runs a single program) the only run it had forwarded a call of, if one
  private parkedMain(child: Child) {
    this.endProbe(child)
    let culprit = child.stepping
    if (culprit === undefined) {
      const started = [...child.runs].filter(([, { called }]) => called)
      if (started.length === 1) culprit = started[0][0]
    }
    child.parked = { culprit }
    this.retire(child, 'was parked by an out-of-memory on its main thread')
  }

  private retire(child: Child, why: string) {
    child.retiring = true
    child.stderr += `\nthe sandbox process ${why}`
    this.kill(child)
  }

  private kill(child: Child) {
    if (!child.exited) child.process.kill('SIGKILL')
  }

  private send(child: Child, message: HostMessage) {
    if (child.exited || !child.process.connected) return
    try {
      child.process.send(message)
    } catch {}
  }

  // a child with runs keeps the host alive until they settle; an idle one does not
  private busy(child: Child) {
    child.process.ref()
    child.process.channel?.ref()
    ;(child.process.stdout as { ref?: () => void } | null)?.ref?.()
    ;(child.process.stderr as { ref?: () => void } | null)?.ref?.()
  }

  private idle(child: Child) {
    child.process.unref()
    child.process.channel?.unref()
    ;(child.process.stdout as { unref?: () => void } | null)?.unref?.()
    ;(child.process.stderr as { unref?: () => void } | null)?.unref?.()
  }
}
