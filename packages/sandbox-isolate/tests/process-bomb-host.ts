// a host for process-bombs.spec.ts, in a process of its own: a host that hangs fails that case, not mocha.
// argv: <programs: a JSON array>, run at once on one process-tier sandbox (isolates in a sandbox process), then a trivial
// run with a tool call in the same sandbox. stdout carries one JSON line: the outcomes, the next run's outcome and the sandbox processes started
import type { BridgeReply, CodeRunOutcome } from '@faber/sandbox'
import { ProcessSandbox } from '@faber/sandbox'
import { isolateBackend } from '../src/index.ts'

const programs: string[] = JSON.parse(process.argv[2])
const sandbox = new ProcessSandbox({
  backend: isolateBackend,
  poolSize: 1,
  // a wall-clock budget far past anything these cases take: a bomb ended by it would end `timeout` or `crash`, never `memory`
  limits: { cpuMs: 20000, wallMs: 60000, memoryMb: 16, outputBytes: 4096 },
})
const brief = (outcome: CodeRunOutcome) =>
  outcome.ok ? { ok: true, result: outcome.result, logs: outcome.logs } : { ok: false, kind: outcome.kind, message: outcome.message }
const echo = async (_: string, json: string): Promise<BridgeReply> => ({ ok: true, value: json })
const run = (code: string) => sandbox.run({ code, tools: ['echo'], call: echo, signal: new AbortController().signal })

await sandbox.ready()
const outcomes = (await Promise.all(programs.map(run))).map(brief)
const next = brief(await run('return [await tools.echo({ n: 1 }), 2]'))
await sandbox.close()
process.stdout.write(`${JSON.stringify({ outcomes, next, started: sandbox.started })}\n`)
