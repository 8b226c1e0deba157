// a third backend, for tests only: what a driver (src/contract.ts) has to supply, written out. programs run in `node:vm`
// contexts on the host's own thread.
//
// node:vm is NOT a security boundary, and this is no sandbox for programs anyone else wrote: the program shares the
// host's process, heap and thread. there is no memory limit (a memory bomb takes the host down), an abort is heard only
// once the program's current stretch of computation ends, and node answers `import()` with an error of the host's
// realm. its spec runs the parts of the shared hazard suite that apply to it, and skips the rest, saying why.

import vm from 'node:vm'
import {
  argumentBytes,
  limitMessages,
  maxPendingCalls,
  messageOf,
  type Program,
  type ProgramReports,
  report,
  type SandboxDriver,
  type Unit,
} from '../src/contract.ts'
import { type PoolOptions, SandboxPool } from '../src/pool.ts'
import { callsSource, preludeSource } from '../src/prelude.mjs'
import type { BridgeReply } from '../src/types.ts'

const prelude = new vm.Script(preludeSource, { filename: 'faber-prelude.js' })
const calls = new vm.Script(callsSource, { filename: 'faber-calls.js' })
// the program's code runs only inside a step: `$faberStep` starts it or hands it the replies that came, and the context
// runs its microtasks before the step returns ('afterEvaluate'), all under the step's timeout. a `let` at the top of a
// script is a binding of the context's scripts, not a property of its global object. the replies wait in a
// null-prototype object, which no setter or method a program put on Array.prototype reaches
const driver = new vm.Script(`let $faberStep
;((setup, ...args) => {
  const { start, deliver } = setup(...args)
  let main
  const replies = Object.create(null)
  let first = 0
  let next = 0
  $faberStep = () => {
    if (main !== undefined) start(main)
    main = undefined
    while (first < next) {
      const reply = replies[first]
      delete replies[first++]
      deliver(reply.call, reply.ok, reply.text, reply.code)
    }
  }
  return {
    begin: (program) => void (main = program),
    reply: (call, ok, text, code) => void (replies[next++] = { __proto__: null, call, ok, text, code }),
  }
})`)
const step = new vm.Script('$faberStep()')

export class VmSandbox extends SandboxPool<Unit> {
  constructor(options: PoolOptions = {}) {
    super(vmDriver, options)
  }
}

export const vmDriver: SandboxDriver<Unit> = {
  backend: 'node-vm',
  createFailure: 'could not make a vm unit',
  // nothing to keep warm: every run gets a fresh context
  create: (memoryMb) => ({ memoryMb, runs: 0 }),
  dispose() {},

  start(_unit: Unit, { request, limits, source }: Program, reports: ProgramReports) {
    const startedAt = performance.now()
    let spent = 0
    let stepping = false
    // what the program reported stands once a step returned: its microtasks have all run
    let reported: [kind: unknown, a: unknown, b: unknown, c: unknown] | undefined
    const outbox: [number, string, string, number | undefined][] = []
    const held: ProgramReports = {
      ...reports,
      ended: () => reports.ended() || reported !== undefined,
      call: (call, name, json, site) => void outbox.push([call, name, json, site]),
    }
    const onBridge = (kind: unknown, a: unknown, b: unknown, c: unknown, d?: unknown) => {
      if (kind === 'done' || kind === 'throw') {
        if (held.ended()) return false
        reported = [kind, a, b, c]
        return true
      }
      return report(held, kind, a, b, c, d)
    }
    const context = vm.createContext(Object.create(null), { name: 'faber-program', microtaskMode: 'afterEvaluate' })
    // the calls' script in the program's realm, before the prelude: the prelude's `shared`
    const shared = calls.runInContext(context)
    const setup = prelude.runInContext(context)
    const api = driver.runInContext(context)(
      setup,
      onBridge,
      JSON.stringify(request.tools),
      limits.outputBytes,
      limits.memoryMb * 1024 * 1024,
      argumentBytes(limits),
      maxPendingCalls,
      shared,
    )

    // runs the program until it waits on the host, bounded by what is left of both budgets
    const advance = () => {
      const cpuLeft = limits.cpuMs - spent
      const wallLeft = limits.wallMs - (performance.now() - startedAt)
      const from = performance.now()
      stepping = true
      try {
        step.runInContext(context, { timeout: Math.max(1, Math.ceil(Math.min(cpuLeft, wallLeft))) })
      } catch (error) {
        if (!/timed out/.test(messageOf(error))) return reports.failed('crash', `the vm step failed: ${messageOf(error)}`)
        return reports.failed('timeout', cpuLeft <= wallLeft ? limitMessages.cpu(limits) : limitMessages.wall(limits))
      } finally {
        stepping = false
        spent += performance.now() - from
      }
      // the calls made before the program returned reach the host even when it returned in the same step
      for (const [call, name, json, site] of outbox.splice(0)) if (!reports.ended()) reports.call(call, name, json, site)
      if (reported) report(reports, ...reported, 0)
    }

    let main: unknown
    try {
      main = new vm.Script(source, { filename: 'program.js', lineOffset: -1 }).runInContext(context)
    } catch (error) {
      const match = /program\.js:(\d+)(?::(\d+))?/.exec(String((error as Error).stack))
      reports.threw(`${(error as Error).name}: ${messageOf(error)}`, match ? Number(match[1]) : undefined, match?.[2] ? Number(match[2]) : undefined, 0)
    }
    if (!reports.ended()) {
      api.begin(main)
      advance()
    }
    return {
      deliver: (call: number, reply: BridgeReply) => {
        api.reply(call, reply.ok, reply.ok ? reply.value : reply.message, reply.ok ? undefined : reply.code)
        if (!stepping) advance()
      },
      cpuUsed: () => spent,
      end() {},
    }
  },
}
