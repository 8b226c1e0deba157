import { execFile } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { agentOf, createAgent, listenersFor } from '@faber/core'
import { deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import { Context } from 'cordis'

const here = dirname(fileURLToPath(import.meta.url))
const ROOT = join(here, '..')
const EVENT = 'faber-test/selection'

declare module 'cordis' {
  interface Events {
    'faber-test/selection'(): void
  }
}

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

// core lists an event's listeners from cordis' hook table, the one read cordis 3.18 offers no public way to make (see
// packages/core/src/cordis.ts): what it selects must be what cordis' own emit calls, in the same order, for every agent
describe("core's listener selection against cordis' own dispatch", () => {
  afterEach(disposeAll)

  it('selects the listeners, in the order, that ctx.emit with an agent filter calls', async () => {
    const ctx = await deployment({ mode: 'native' })
    const worker = createAgent(ctx, { name: 'worker' })
    const child = createAgent(ctx, { name: 'child', parent: worker })
    const other = createAgent(ctx, { name: 'other' })
    const heard: string[] = []
    const hear = (label: string) => () => void heard.push(label)
    ctx.on(EVENT, hear('root'))
    worker.ctx.on(EVENT, hear('worker'))
    worker.ctx.on(EVENT, hear('worker first'), { prepend: true })
    child.ctx.on(EVENT, hear('child'))
    other.ctx.on(EVENT, hear('other'))
    other.ctx.on(EVENT, hear('other, global'), { global: true })
    ctx.on(EVENT, hear('removed'))()
    const fork = child.ctx.plugin({ name: 'unloaded', apply: (c: Context) => void c.on(EVENT, hear('unloaded')) })
    await ctx.lifecycle.flush()
    fork.dispose()
    ctx.plugin({ name: 'loaded', apply: (c: Context) => void c.on(EVENT, hear('loaded')) })
    await ctx.lifecycle.flush()

    const selections: Record<string, { cordis: string[]; faber: string[] }> = {}
    for (const agent of [undefined, worker, child, other]) {
      heard.length = 0
      // the agent scope as cordis' Context.filter contract reads it: a listener of no agent, or of the agent's chain
      const scope = { [Context.filter]: (c: Context) => agentOf(c) === undefined || agent?.isWithin(agentOf(c)!) === true }
      ctx.emit(scope, EVENT)
      const cordis = heard.splice(0)
      for (const listener of listenersFor(ctx, EVENT, agent)) listener.callback()
      selections[agent?.name ?? 'global'] = { cordis, faber: heard.splice(0) }
    }
    for (const { cordis, faber } of Object.values(selections)) expect(faber).to.deep.equal(cordis)
    // the cases are not all alike: each audience hears its own chain, in cordis' order
    expect(selections.global.cordis).to.deep.equal(['root', 'other, global', 'loaded'])
    expect(selections.child.cordis).to.deep.equal(['worker first', 'root', 'worker', 'child', 'other, global', 'loaded'])
    expect(selections.other.cordis).to.deep.equal(['root', 'other', 'other, global', 'loaded'])
  })
})
