// a deployment composed the way the READMEs show — ctx.plugin(...) and await ctx.start(), no start check — runs no
// tool body while any of its plugins is not in force: every call ends as DEPLOYMENT_FAILED naming the plugin, until
// the plugin is fixed or disposed. no helper call (startDeployment, assertStarted) is involved.

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { type ToolResult } from '@faber/core'
import { echoTool } from '@faber/core/testing'
import Approval from '@faber/plugin-approval'
import Guards from '@faber/plugin-guards'
import WorkerSandbox from '@faber/sandbox'
import DeploymentStore, { SqliteStore } from '@faber/store'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'

Logger.levels.base = 0

const signal = () => new AbortController().signal
let calls = 0

function call(ctx: Context, name = 'danger', args: unknown = { text: 'x' }): Promise<ToolResult> {
  return ctx.tools.execute({ callId: `c${++calls}`, name, arguments: args, signal: signal() })
}

function code(result: ToolResult) {
  return result.isError ? result.error.code : 'OK'
}

describe('no tool runs while a plugin of the deployment is not in force', () => {
  let ctx: Context
  let ran: number
  let dir: string

  beforeEach(async () => {
    ctx = new Context()
    ran = 0
    dir = await mkdtemp(join(tmpdir(), 'faber-fail-closed-'))
  })
  afterEach(async () => {
    await ctx.stop()
    await rm(dir, { recursive: true, force: true })
  })

  /** the runtime and the tool `danger` (counted), then `load`, then start: as a deployer writes it */
  async function deploy(load: (ctx: Context) => void, config: ToolRuntime.ConfigInput = {}) {
    ctx.plugin(ToolRuntime, config)
    load(ctx)
    await ctx.start()
    ctx.tools.register(echoTool('danger', { onRun: () => ran++ }))
  }

  async function refused(plugin: string, reason: RegExp | string) {
    const result = await call(ctx)
    expect(code(result), result.content).to.equal('DEPLOYMENT_FAILED')
    expect(result.content).to.contain(`no tool can run: plugin "${plugin}" is not in force`)
    if (typeof reason === 'string') expect(result.content).to.contain(reason)
    else expect(result.content).to.match(reason)
    expect(result.trace?.[0]).to.deep.include({ stage: 'create', decision: 'deployment-failed', by: plugin })
    expect(ran).to.equal(0)
  }

  it('a misspelt approval key', async () => {
    await deploy((ctx) => ctx.plugin(Approval, { require: ['danger'], requre: ['danger'] } as never))
    await refused('approval', '`requre`: unknown key; did you mean `require`?')
    expect(ctx.tools.faults()).to.have.length.above(0)
    expect(ctx.tools.faults()[0]).to.deep.include({ plugin: 'approval', state: 'failed', essential: true })
  })

  it('a key an older approval config had (file)', async () => {
    await deploy((ctx) => ctx.plugin(Approval, { file: join(dir, 'grants.json') } as never))
    await refused('approval', '`file`: unknown key')
  })

  it('a guard rule whose pattern does not compile', async () => {
    await deploy((ctx) => ctx.plugin(Guards, { deny: [{ tools: ['*'], argument: '$.text', pattern: '([', reason: 'no' }] }))
    await refused('guards', /it failed to start \(.*Invalid regular expression/)
  })

  it('a plugin whose apply throws, loaded after the start; disposing it restores service', async () => {
    await deploy(() => {})
    expect(code(await call(ctx))).to.equal('OK')
    const fork = ctx.plugin({
      name: 'audit',
      apply() {
        throw new Error('the audit sink is unreachable')
      },
    })
    await ctx.lifecycle.flush()
    ran = 0
    await refused('audit', 'it failed to start (the audit sink is unreachable); reload it with a valid config, or dispose it')
    fork.dispose()
    expect(code(await call(ctx))).to.equal('OK')
    expect(ctx.tools.faults()).to.deep.equal([])
  })

  it('reloading the plugin with a valid config restores service', async () => {
    let fork!: ReturnType<Context['plugin']>
    await deploy((ctx) => {
      fork = ctx.plugin(Approval, { require: ['danger'], requre: ['danger'] } as never)
    })
    await refused('approval', 'unknown key')
    fork.update({ require: ['danger'] })
    await ctx.lifecycle.flush()
    // in force again: approval asks, and with no answerer loaded the call is denied, not run
    const result = await call(ctx)
    expect(code(result), result.content).to.equal('DENIED')
    expect(result.isError && result.error.deniedBy).to.deep.equal({ stage: 'approval', plugin: 'approval' })
    expect(ran).to.equal(0)
  })

  for (const order of ['store first', 'approval first'] as const) {
    it(`a store written by a newer Faber (${order})`, async () => {
      const path = join(dir, 'faber.db')
      const newer = new SqliteStore(path)
      await newer.migrate(
        'approval',
        Array.from({ length: 99 }, () => 'SELECT 1'),
      )
      await newer.close()
      await deploy((ctx) => {
        if (order === 'store first') ctx.plugin(DeploymentStore, { path })
        ctx.plugin(Approval, { require: ['danger'] })
        if (order === 'approval first') ctx.plugin(DeploymentStore, { path })
      })
      // the same in both orders: approval cannot use the store's grants, so it is not in force
      await refused('approval', 'newer than this Faber knows')
    })
  }

  /** a third-party guard that needs a service, `vault`, no plugin provides until a case loads one */
  const deployVaultGuard = (startGraceMs: number) =>
    deploy(
      (ctx) =>
        ctx.plugin({
          name: 'vault-guard',
          inject: ['tools', 'vault'],
          apply: (ctx: Context) => ctx.tools.guard(() => 'denied by the vault'),
        }),
      { startGraceMs },
    )

  it('a third-party guard waiting for a service that never comes, past the grace', async () => {
    await deployVaultGuard(200)
    expect(ctx.tools.faults()[0]).to.deep.include({ plugin: 'vault-guard', state: 'starting', missing: ['vault'] })
    const started = Date.now()
    // a call made within the grace waits for the plugin, then is refused when it never comes
    await refused('vault-guard', 'it waits for the service "vault", which no loaded plugin provided within 200 ms')
    expect(Date.now() - started).to.be.at.least(150)
    expect(ctx.tools.faults()[0]).to.deep.include({ state: 'waiting' })
  })

  it('a call waiting within the grace runs under the plugin once its service comes', async () => {
    await deployVaultGuard(5_000)
    const pending = call(ctx)
    await new Promise((resolve) => setTimeout(resolve, 20))
    ctx.plugin({ name: 'vault', apply: (ctx: Context) => ctx.set('vault', {}) })
    const result = await pending
    expect(result.isError && result.error).to.deep.include({ code: 'DENIED', message: 'denied by the vault' })
    expect(ran).to.equal(0)
  })

  it('a plugin declared non-essential leaves the deployment in force, and is still reported', async () => {
    await deploy(
      (ctx) =>
        ctx.plugin({
          name: 'metrics',
          apply() {
            throw new Error('no metrics endpoint')
          },
        }),
      { nonEssential: ['metrics'] },
    )
    expect(code(await call(ctx))).to.equal('OK')
    expect(ctx.tools.faults()).to.have.length.above(0)
    expect(ctx.tools.faults()[0]).to.deep.include({ plugin: 'metrics', state: 'failed', essential: false })
  })

  it('nested calls of a run_code program are refused too, from the moment a plugin fails', async function () {
    this.timeout(20_000)
    await deploy((ctx) => ctx.plugin(WorkerSandbox, { poolSize: 1 }), { mode: 'code' })
    ctx.tools.register(
      echoTool('breaker', {
        onRun: () =>
          void ctx.plugin({
            name: 'late-policy',
            apply() {
              throw new Error('its rules file is corrupt')
            },
          }),
      }),
    )
    const program = [
      "await tools.danger({ text: 'before' })",
      "await tools.breaker({ text: 'x' })",
      "try { await tools.danger({ text: 'after' }); return 'ran' } catch (error) { return error.code }",
    ].join('\n')
    const result = await call(ctx, 'run_code', { code: program, description: 'break the deployment midway' })
    expect(code(result), result.content).to.equal('OK')
    expect(result.isError ? undefined : (result.value as { result: unknown }).result).to.equal('DEPLOYMENT_FAILED')
    expect(ran).to.equal(1)
    ran = 0
    await refused('late-policy', 'its rules file is corrupt')
  })
})
