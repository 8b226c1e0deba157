// a host for bombs.spec.ts, in a process of its own: a host that hangs or dies fails those cases, not mocha.
// argv: <cases: a JSON array of [program, tool calls made before it]>, run one by one on one in-process IsolateSandbox.
// stdout carries one report line per case, then `{"end":true,"parked":n}` once the sandbox closed.

import type { BridgeReply, CodeRunOutcome } from '@faber/sandbox'
import { IsolateSandbox } from '../src/isolate-sandbox.ts'

const cases: [string, number][] = JSON.parse(process.argv[2])
const sandbox = new IsolateSandbox({ poolSize: 1, limits: { cpuMs: 20000, wallMs: 60000, memoryMb: 16, outputBytes: 4096 } })
const brief = (outcome: CodeRunOutcome) =>
  outcome.ok ? { ok: true, result: outcome.result } : { ok: false, kind: outcome.kind, message: outcome.message.slice(0, 300) }
const echo = async (_: string, json: string): Promise<BridgeReply> => ({ ok: true, value: json })

// a timer of the host's own: it keeps firing while programs run, unless something holds the host's thread
let beats = 0
const beat = setInterval(() => beats++, 1)

await sandbox.run({ code: 'return 1', tools: ['echo'], call: echo, signal: new AbortController().signal })
for (const [bomb, calls] of cases) {
  let made = 0
  // set as the reply to the program's last tool call goes out: the bomb starts after that reply
  let turned = false
  const call = async (name: string, json: string) => {
    if (++made === calls) setImmediate(() => (turned = true))
    return echo(name, json)
  }
  const code = `for (let i = 0; i < ${calls}; i++) await tools.echo({ i })\n${bomb}`
  const beatsBefore = beats
  const outcome = brief(await sandbox.run({ code, tools: ['echo'], call, signal: new AbortController().signal }))
  const during = beats - beatsBefore
  const next = brief(await sandbox.run({ code: 'return [await tools.echo({ n: 1 }), 2]', tools: ['echo'], call: echo, signal: new AbortController().signal }))
  // the host's timers still fire after the bomb
  await new Promise((resolve) => setTimeout(resolve, 1))
  process.stdout.write(`${JSON.stringify({ outcome, made, turned, beats: during, next })}\n`)
}
clearInterval(beat)
await sandbox.close()
process.stdout.write(`${JSON.stringify({ end: true, parked: sandbox.parked })}\n`)
