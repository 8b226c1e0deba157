import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

// in a process of its own: the warm-up runs once per process, and this one must be the first
describe('warmRunCode', function () {
  // a child process on a loaded machine; nothing here is timed
  this.timeout(120_000)

  it('warms the run_code path once: a caller while it warms waits for it, and is told the path is warm', async () => {
    const fixture = fileURLToPath(new URL('./fixtures/warm-twice.ts', import.meta.url))
    const ran = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, ['--import', 'tsx/esm', fixture], (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
      )
    })
    expect(ran.code, ran.stderr).to.equal(0)
    expect(ran.stderr).to.equal('')
    expect(JSON.parse(ran.stdout)).to.deep.equal({ together: [true, true], after: true })
  })
})
