import { execFile } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

const here = dirname(fileURLToPath(import.meta.url))
const ROOT = join(here, '..')

/** runs the probe in a process of its own, with `@faber/core` imported and a deployment running when `faber` */
function probe(faber: boolean): Promise<Record<string, unknown>> {
  const args = ['--import', 'tsx', join(here, 'fixtures/cordis-probe.ts'), ...(faber ? ['faber'] : [])]
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { cwd: ROOT, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`the probe${faber ? ' with Faber' : ''} failed: ${stderr || error.message}`))
      else resolve(JSON.parse(stdout))
    })
  })
}

// Faber uses cordis as cordis ships: importing @faber/core and running a deployment changes nothing another cordis
// plugin (a Koishi bot's, say) sees in the same process
describe('cordis with and without Faber in the process', () => {
  it('answers every probed behaviour the same', async function () {
    this.timeout(120_000)
    const [plain, withFaber] = await Promise.all([probe(false), probe(true)])
    // the probe saw what it looks for: not two empty answers that happen to agree
    expect(plain.prototype).to.deep.equal(['constructor'])
    expect(plain.readWarnings).to.have.length(2)
    expect(plain.order).to.deep.equal({ heard: ['first', 'a', 'b', 'thrower'], threw: 'stop', serial: 'second', bail: 'second' })
    expect(plain.dispose).to.deep.equal(['on', 'lifecycle', 'events', 'disposed', 'effect ended'])
    expect(plain.reload).to.deep.equal({ applied: [1, 2], heard: ['n=2'] })
    expect(plain.services).to.deep.include({
      tracing: { method: true, getterOver: true, instance: true, newProxyEachRead: true },
      replaced: true,
      isolated: true,
    })
    expect(withFaber).to.deep.equal(plain)
  })
})
