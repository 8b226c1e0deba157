// the run_code bridge under hostile values, on both sandbox backends, each in a child process run with
// --unhandled-rejections=strict: a host that dies fails that backend's test instead of taking mocha down with it.

import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { MAX_JSON_DEPTH } from '@faber/core'
import { expect } from 'chai'

const fixture = fileURLToPath(new URL('./fixtures/hostile-bridge.ts', import.meta.url))
const root = fileURLToPath(new URL('..', import.meta.url))

function runFixture(backend: string): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--no-node-snapshot', '--unhandled-rejections=strict', '--import', 'tsx/esm', fixture, backend], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

for (const backend of ['worker', 'isolate']) {
  describe(`the run_code bridge under hostile values (${backend} backend, child process)`, () => {
    it('answers every program, keeps keys as data, and the host lives', async function () {
      this.timeout(60_000)
      const ran = await runFixture(backend)
      expect(ran.code, `the host died (${ran.signal ?? ran.code}):\n${ran.stderr.slice(-3000)}`).to.equal(0)
      const lines = ran.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line))
      const results = Object.fromEntries(lines.filter((line) => line.name).map((line) => [line.name, line]))
      const { received } = lines.at(-1)

      // the one-liner: a failed program that says why, not a dead host
      expect(results.deepArgument).to.include({ code: 'CODE_RUN_FAILED', kind: 'exception' })
      expect(results.deepArgument.message).to.contain('ToolCallError')
      expect(results.deepArgument.message).to.match(new RegExp(`nested (deeper than ${MAX_JSON_DEPTH} levels|too deeply)`))
      expect(results.deepArgumentCaught.value.result[0]).to.equal('ToolCallError')

      // a __proto__ key is a property like any other: refused where the schema allows none, kept as data where it does
      expect(results.protoKey).to.include({ code: 'CODE_RUN_FAILED' })
      expect(results.protoKey.message).to.contain('unexpected property "__proto__"')
      expect(results.protoData).to.deep.include({ code: 'OK', value: { logs: [], result: ['__proto__'] } })
      expect(received).to.deep.equal(['echo {"__proto__":{"path":"/etc/passwd"}} undefined', 'echo {"still":"alive"} undefined'])

      // too deep coming back from a tool, or as the program's own result: a failure naming the bound
      expect(results.deepResult.message).to.contain(`"deep" returned a value that is not JSON: $.x.x.x`)
      expect(results.deepReturn).to.include({ code: 'CODE_RUN_FAILED' })
      expect(results.deepReturn.message).to.match(new RegExp(`nested (deeper than ${MAX_JSON_DEPTH} levels|too deeply)`))

      expect(results.withinBounds).to.deep.include({ code: 'OK', value: { logs: [], result: 200 } })
      expect(results.manyListening).to.deep.include({ code: 'OK', value: { logs: [], result: 40 } })

      // thrown, printed or returned values whose reading throws: described, and the run ends as the program's failure
      for (const name of ['throwRevoked', 'throwTrapping']) {
        expect(results[name], name).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'exception' })
        expect(results[name].message, name).to.contain('a value that could not be described')
      }
      expect(results.logTrapping).to.deep.include({ code: 'OK', value: { logs: ['[uninspectable]'], result: 1 } })
      expect(results.returnThenGetter).to.deep.include({ code: 'CODE_RUN_FAILED', kind: 'exception' })
      expect(results.returnThenGetter.message).to.contain('Error: then')
      expect(results.hugeErrorName.message).to.contain('(20000000 characters, too long to show): x')
      expect(results.replacedBuiltins).to.deep.include({ code: 'OK', value: { logs: ['{a: 1}'], result: { b: 2 } } })
      expect(results.oddNames).to.deep.include({
        code: 'OK',
        value: { logs: [], result: ['tool __proto__', 'tool then', 'tool constructor', 'undefined', null] },
      })
      // nothing a program did reached the host's stderr (a listener warning, say)
      expect(ran.stderr).to.equal('')
      expect(results.after).to.deep.include({ code: 'OK', value: { logs: [], result: 'alive' } })
    })
  })
}
