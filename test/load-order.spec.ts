// a policy is in force whatever the load order: each policy plugin (guards' rules, rate limits and timeout wrapper,
// approval with its rules answerer and with grants kept in the store, fs-observation, the inspector, otel) loaded
// before the runtime, after it, and with the runtime replaced while the deployment runs. the plugins are loaded the
// way their READMEs show (default imports).

import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { assertStarted, defineTool, type ToolResult, t } from '@faber/core'
import Approval, { TerminalAnswerer } from '@faber/plugin-approval'
import FsObservation from '@faber/plugin-fs-observation'
import Guards from '@faber/plugin-guards'
import Otel from '@faber/plugin-otel'
import Inspector, { renderReport } from '@faber/plugin-tool-cordis'
import ToolsFs from '@faber/plugin-tools-fs'
import DeploymentStore from '@faber/store'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'
import { type Recorder, record } from '../plugins/otel/tests/helpers.ts'

Logger.levels.base = 0

interface Policy {
  load(ctx: Context, root: string): void
  /** makes the call the policy must stop, and returns its result */
  attempt(ctx: Context, root: string): Promise<ToolResult>
  deniedBy: { stage: string; plugin: string }
  /** what must be unchanged on disk afterwards */
  untouched(root: string): Promise<void>
}

/** a plugin that does its work by other means than a denial: `check` proves it did */
interface Working {
  load(ctx: Context, root: string): void
  check(ctx: Context, root: string): Promise<void>
}

let sequence = 0
const call = (ctx: Context, name: string, args: unknown) =>
  ctx.tools.execute({ callId: `c${++sequence}`, name, arguments: args, signal: new AbortController().signal })

const noNewFile = async (root: string) => {
  const created = await readFile(join(root, 'new.txt'), 'utf8').catch(() => undefined)
  expect(created, 'the denied write must not have happened').to.equal(undefined)
}

const policies: Record<string, Policy> = {
  '@faber/plugin-guards': {
    load: (ctx) => ctx.plugin(Guards, { deny: [{ tools: ['write'], reason: 'nothing is written here' }] }),
    attempt: (ctx) => call(ctx, 'write', { path: 'new.txt', content: 'x' }),
    deniedBy: { stage: 'pre-execute', plugin: 'guards' },
    untouched: noNewFile,
  },
  '@faber/plugin-approval': {
    load: (ctx) => ctx.plugin(Approval, { policy: 'never', require: ['write'] }),
    attempt: (ctx) => call(ctx, 'write', { path: 'new.txt', content: 'x' }),
    deniedBy: { stage: 'approval', plugin: 'approval' },
    untouched: noNewFile,
  },
  '@faber/plugin-fs-observation': {
    load: (ctx) => ctx.plugin(FsObservation),
    attempt: (ctx) => call(ctx, 'edit', { path: 'notes.txt', oldString: 'hello', newString: 'changed' }),
    deniedBy: { stage: 'pre-execute', plugin: 'fs-observation' },
    untouched: async (root) => {
      expect(await readFile(join(root, 'notes.txt'), 'utf8')).to.equal('hello\n')
    },
  },
  '@faber/plugin-guards (rate limits)': {
    load: (ctx) => ctx.plugin(Guards, { rateLimits: [{ tools: ['write'], perMinute: 1 }] }),
    attempt: async (ctx) => {
      const first = await call(ctx, 'write', { path: 'new.txt', content: 'first' })
      expect(first.isError, first.content).to.equal(false)
      return call(ctx, 'write', { path: 'new.txt', content: 'second' })
    },
    deniedBy: { stage: 'pre-execute', plugin: 'guards' },
    untouched: async (root) => {
      expect(await readFile(join(root, 'new.txt'), 'utf8')).to.equal('first')
      await rm(join(root, 'new.txt'))
    },
  },
  '@faber/plugin-approval (its rules answerer)': {
    load: (ctx) => ctx.plugin(Approval, { require: ['write'], rules: [{ tool: 'write', decision: 'reject' }] }),
    attempt: (ctx) => call(ctx, 'write', { path: 'new.txt', content: 'x' }),
    deniedBy: { stage: 'approval', plugin: 'approval' },
    untouched: noNewFile,
  },
  '@faber/plugin-approval with @faber/store (a persisted grant)': {
    load: (ctx, root) => {
      ctx.plugin(DeploymentStore, { path: join(root, '.faber', 'faber.db') })
      ctx.plugin(Approval, { require: ['write'] })
    },
    attempt: async (ctx) => {
      if (!(await (ctx.approval as Approval).grants()).length) await (ctx.approval as Approval).grant({ tool: 'write', decision: 'reject', scope: 'always' })
      return call(ctx, 'write', { path: 'new.txt', content: 'x' })
    },
    deniedBy: { stage: 'approval', plugin: 'approval' },
    untouched: noNewFile,
  },
}

// a tool that waits for its signal, registered by a plugin (so it comes back with a replaced runtime)
const Stalling = {
  name: 'stalling',
  inject: ['tools'],
  apply: (ctx: Context) =>
    ctx.tools.register(
      defineTool({
        name: 'stall',
        description: 'waits until it is aborted',
        parameters: t.object({}),
        output: { schema: t.object({}) },
        timeoutMs: 50,
        execute: (_args, run) => new Promise((_, reject) => run.signal.addEventListener('abort', () => reject(run.signal.reason), { once: true })),
      }),
    ),
}

const working: Record<string, Working> = {
  '@faber/plugin-guards (the timeout wrapper)': {
    load: (ctx) => {
      ctx.plugin(Stalling)
      ctx.plugin(Guards)
    },
    check: async (ctx) => {
      const result = await call(ctx, 'stall', {})
      expect(result.isError && result.error.code, result.content).to.equal('TOOL_TIMEOUT')
    },
  },
  '@faber/plugin-tool-cordis': {
    load: (ctx) => ctx.plugin(Inspector),
    check: async (ctx) => {
      const read = await call(ctx, 'read', { path: 'notes.txt' })
      expect(read.isError, read.content).to.equal(false)
      const report = ctx.inspector.report()
      expect(report.inactive).to.deep.equal([])
      expect(report.calls.map((record) => record.callId)).to.include(`c${sequence}`)
      const inspected = await call(ctx, 'cordis_inspect', { what: 'calls' })
      expect(inspected.isError, inspected.content).to.equal(false)
      expect(inspected.content).to.contain('read')
    },
  },
  '@faber/plugin-otel': {
    load: (ctx) => ctx.plugin(Otel),
    check: async (ctx) => {
      const read = await call(ctx, 'read', { path: 'notes.txt' })
      expect(read.isError, read.content).to.equal(false)
      const spans = recorder.exporter.getFinishedSpans().filter((span) => span.name === 'execute_tool read')
      expect(spans, 'a span for the call').to.have.length.greaterThan(0)
      recorder.exporter.reset()
    },
  },
}

let recorder: Recorder

describe('policy plugins in any load order', () => {
  let root: string
  let ctx: Context
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'faber-order-'))
    await writeFile(join(root, 'notes.txt'), 'hello\n')
    ctx = new Context()
  })
  afterEach(async () => {
    await ctx.stop()
    await rm(root, { recursive: true, force: true })
  })

  async function inForce(policy: Policy) {
    const result = await policy.attempt(ctx, root)
    expect(result.isError && result.error, result.content).to.deep.include({ code: 'DENIED', deniedBy: policy.deniedBy })
    await policy.untouched(root)
  }

  for (const [label, plugin] of Object.entries(working)) {
    describe(label, () => {
      beforeEach(() => {
        recorder = record()
      })
      afterEach(() => recorder.close())

      it('loaded before the runtime', async () => {
        plugin.load(ctx, root)
        ctx.plugin(ToolsFs, { root })
        ctx.plugin(ToolRuntime)
        await ctx.start()
        await assertStarted(ctx)
        await plugin.check(ctx, root)
      })

      it('loaded after the runtime', async () => {
        ctx.plugin(ToolRuntime)
        ctx.plugin(ToolsFs, { root })
        await ctx.start()
        plugin.load(ctx, root)
        await assertStarted(ctx)
        await plugin.check(ctx, root)
      })

      it('with the runtime replaced while the deployment runs', async () => {
        const first = ctx.plugin(ToolRuntime)
        ctx.plugin(ToolsFs, { root })
        plugin.load(ctx, root)
        await ctx.start()
        await assertStarted(ctx)
        await plugin.check(ctx, root)
        first.dispose()
        ctx.plugin(ToolRuntime)
        await assertStarted(ctx)
        await plugin.check(ctx, root)
      })
    })
  }

  for (const [label, policy] of Object.entries(policies)) {
    describe(label, () => {
      it('loaded before the runtime', async () => {
        policy.load(ctx, root)
        ctx.plugin(ToolsFs, { root })
        ctx.plugin(ToolRuntime)
        await ctx.start()
        await assertStarted(ctx)
        await inForce(policy)
      })

      it('loaded after the runtime', async () => {
        ctx.plugin(ToolRuntime)
        ctx.plugin(ToolsFs, { root })
        await ctx.start()
        policy.load(ctx, root)
        await assertStarted(ctx)
        await inForce(policy)
      })

      it('with the runtime replaced while the deployment runs', async () => {
        const first = ctx.plugin(ToolRuntime)
        ctx.plugin(ToolsFs, { root })
        policy.load(ctx, root)
        await ctx.start()
        await assertStarted(ctx)
        await inForce(policy)
        const before = ctx.get('tools')
        first.dispose()
        ctx.plugin(ToolRuntime)
        await assertStarted(ctx)
        expect(ctx.get('tools')).to.not.equal(before)
        await inForce(policy)
      })
    })
  }
})

describe('a plugin that never starts', () => {
  it('waiting for a service no plugin provides, it fails the start check, naming what it waits for', async () => {
    const ctx = new Context()
    ctx.plugin(FsObservation)
    await ctx.start()
    const error = await assertStarted(ctx).then(
      () => undefined,
      (e: Error) => e,
    )
    expect(error?.message).to.equal(
      'plugin "fs-observation" failed to start: it needs the service "tools", which no loaded plugin provides; load the plugin that provides it',
    )
    await ctx.stop()
  })
})

describe('the inspector flags a loaded policy plugin that is not active', () => {
  it('one waiting for a service and one that failed, in the report and its text', async () => {
    const ctx = new Context()
    ctx.plugin(ToolRuntime)
    ctx.plugin(Inspector, { tool: false })
    ctx.plugin(TerminalAnswerer)
    ctx.plugin(Guards, { breaker: { remindAfter: 5, blockAfter: 2 } })
    await ctx.start()
    await ctx.lifecycle.flush()
    const report = ctx.inspector.report()
    expect(report.inactive).to.deep.equal([
      { name: 'approval-terminal', state: 'pending', reason: 'waiting for approval, which no loaded plugin provides' },
      {
        name: 'guards',
        state: 'failed',
        reason: 'failed: guards: breaker.blockAfter (2) must be greater than breaker.remindAfter (5), or 0 to never block',
      },
    ])
    const text = renderReport(report)
    expect(text).to.contain('NOT ACTIVE: approval-terminal (waiting for approval, which no loaded plugin provides); nothing it enforces is in force')
    expect(text).to.contain('NOT ACTIVE: guards (failed: guards: breaker.blockAfter (2)')
    ctx.plugin(Approval)
    await ctx.lifecycle.flush()
    expect(ctx.inspector.report().inactive.map((entry) => entry.name)).to.deep.equal(['guards'])
    await ctx.stop()
  })
})
