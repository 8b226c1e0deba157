import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { defaultCodeLimits } from '@faber/core'
import { expect } from 'chai'
import { Context } from 'cordis'
import WorkerSandboxService, { ProcessSandbox, workerBackend } from '../src/index.ts'

const fixture = fileURLToPath(new URL('./fixtures/awaits-ready.ts', import.meta.url))

function host(isolation: string) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const proc = spawn(process.execPath, ['--no-node-snapshot', '--import', 'tsx/esm', fixture, isolation], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    proc.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk))
    proc.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk))
    proc.on('error', reject)
    proc.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

// in a process of its own: the host's warm-up runs once per process, and whether a host ends by itself is its exit
describe('sandbox service: ready() in a host that awaits nothing else', function () {
  this.timeout(120000)
  for (const isolation of ['process', 'in-process']) {
    it(`waits for the sandbox, warms the host unseen, and lets the host end (${isolation}); programs then strip as before`, async () => {
      const { code, stdout, stderr } = await host(isolation)
      expect(code, `exit code; stderr: ${stderr.slice(-600)}`).to.equal(0)
      expect(stderr).to.equal('')
      expect(JSON.parse(stdout)).to.deep.equal({
        seen: [],
        warm: true,
        load: { running: 0, queued: 0, maxConcurrent: 3, peakRunning: 0, peakQueued: 0 },
        // the warm-up stripped a syntax error and an enum of its own: the host's programs are still told where theirs are
        outcomes: [
          { logs: [], result: 2 },
          { kind: 'syntax', line: 2 },
          { kind: 'syntax', line: 1 },
        ],
      })
    })
  }
})

describe('sandbox service: setup', () => {
  it('spawns its sandbox process after the turn it was made on, and none when closed before it', async () => {
    const ctx = new Context()
    ctx.plugin(WorkerSandboxService, { poolSize: 1 })
    const sandbox = (ctx.get('codeRuntime') as WorkerSandboxService).sandbox as unknown as ProcessSandbox
    // ready() was asked for at construction, and still nothing was spawned in it
    expect(sandbox.started).to.equal(0)
    await ctx.stop()
    const closed = new ProcessSandbox({ backend: workerBackend })
    await closed.close()
    await new Promise((resolve) => setImmediate(resolve))
    expect(closed.started).to.equal(0)
  })
})

// the defaults as a deployment gets them: the worker backend on the process tier, memoryMb 64, cpuMs 5000. each waiting
// call holds ~440 bytes of the program's heap, and calls and replies cross the worker's thread in batches: before, the
// fan-out ran out of 64 MB (~890 bytes a call) or of cpuMs (a message each way per call)
describe('sandbox service: a fan-out on the defaults', function () {
  this.timeout(120000)
  it('runs 100,000 calls started at once under Promise.all to the end, each answered in order', async () => {
    const ctx = new Context()
    ctx.plugin(WorkerSandboxService)
    const service = ctx.get('codeRuntime') as WorkerSandboxService
    let calls = 0
    const call = async (_name: string, json: string) => {
      calls++
      return { ok: true as const, value: json }
    }
    try {
      // nothing configured: the limits a run gets are core's defaults
      expect(service.config).to.deep.include({ isolation: 'process', limits: {} })
      expect(defaultCodeLimits).to.deep.include({ cpuMs: 5000, memoryMb: 64 })
      const code = 'const r = await Promise.all(Array.from({ length: 100000 }, (_, i) => tools.echo({ i })))\nreturn r.every((v, i) => v.i === i) && r.length'
      const outcome = await service.run({ code, tools: ['echo'], call, signal: new AbortController().signal })
      expect(outcome).to.deep.include({ ok: true, result: '100000' })
      expect(calls).to.equal(100000)
    } finally {
      await ctx.stop()
    }
  })
})
