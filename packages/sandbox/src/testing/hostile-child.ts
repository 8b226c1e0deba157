// a host for the hostile-program suite, run in a process of its own by hostile.ts: a crash here fails its cases, not mocha.
// argv: <backend: a HostileBackend as JSON> <isolation: process | in-process> <programs, a JSON array run one by one>
// stdout carries one line per program, its report; anything else written there or to stderr is a finding.

import { ProcessSandbox } from '../index.ts'
import type { BridgeReply, CodeRunOutcome, CodeRuntime } from '../types.ts'
import type { HostileBackend } from './hostile.ts'

const [backendJson, isolation, programsJson] = process.argv.slice(2)
const backend: HostileBackend = JSON.parse(backendJson)
const programs: string[] = JSON.parse(programsJson)
const options = { poolSize: 1, limits: { cpuMs: 10000, wallMs: 20000, memoryMb: 16, outputBytes: 4096 } }
const exports = await import(backend.module)
const sandbox: CodeRuntime & { close(): Promise<void> } =
  isolation === 'process' ? new ProcessSandbox({ ...options, backend: exports[backend.backend] }) : new exports[backend.sandbox](options)

const call = async (name: string, json: string): Promise<BridgeReply> => (name === 'echo' ? { ok: true, value: json } : { ok: false, message: 'no such tool' })
const run = (code: string) => sandbox.run({ code, tools: ['echo'], call, signal: new AbortController().signal })
const brief = (outcome: CodeRunOutcome) =>
  outcome.ok ? { ok: true, result: outcome.result } : { ok: false, kind: outcome.kind, message: outcome.message.slice(0, 300) }
// after a full collection: what the host still holds (heap), and what the process keeps from the allocator (rss)
const memory = () => {
  ;(globalThis as { gc?: () => void }).gc?.()
  const { rss, heapUsed, external } = process.memoryUsage()
  return { rss: Math.round(rss / 1024 / 1024), heap: Math.round((heapUsed + external) / 1024 / 1024) }
}
/** what the host writes for each program, a line of JSON (hostile.ts reads it) */
export type Report = { outcome: ReturnType<typeof brief>; next: ReturnType<typeof brief>; before: ReturnType<typeof memory>; after: ReturnType<typeof memory> }

// warm: the baseline is a host that has already run a program
await run('return 1')
const before = memory()
for (const program of programs) {
  const outcome = brief(await run(program))
  // a program's scheduled work would show up here, in the next run or on the host's streams
  await new Promise((resolve) => setTimeout(resolve, 50))
  const next = brief(await run('return [1, typeof FinalizationRegistry]'))
  process.stdout.write(`${JSON.stringify({ outcome, next, before, after: memory() } satisfies Report)}\n`)
}
await sandbox.close()
