// every plugin's Config is strict: a misspelt top-level key stops the plugin from starting, and the message names the
// key and the one it most likely meant; a deployment file run by the real `faber` reports it with file and line.

import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { assertStarted, PluginStartError, startDeployment } from '@faber/core'
import Approval, { TerminalAnswerer, WebAnswerer } from '@faber/plugin-approval'
import * as FsObservation from '@faber/plugin-fs-observation'
import * as Guards from '@faber/plugin-guards'
import * as Mcp from '@faber/plugin-mcp'
import * as Otel from '@faber/plugin-otel'
import Inspector from '@faber/plugin-tool-cordis'
import * as ToolsFs from '@faber/plugin-tools-fs'
import ToolsShell from '@faber/plugin-tools-shell'
import WorkerSandbox from '@faber/sandbox'
import IsolateSandbox from '@faber/sandbox-isolate'
import DeploymentStore from '@faber/store'
import { expect } from 'chai'
import { Context, Logger, type Schema } from 'cordis'
import { faber } from '../packages/cli/tests/helpers.ts'

Logger.levels.base = 0

interface Subject {
  plugin: { Config: Schema; name?: string }
  /** a config that starts, for plugins with required keys */
  base?: Record<string, unknown>
  needsTools?: boolean
  /** a service plugin it needs besides the runtime */
  needs?: unknown
}

const STORE = join(tmpdir(), `faber-strict-${process.pid}.db`)

const subjects: Record<string, Subject> = {
  '@faber/core': { plugin: ToolRuntime as never },
  '@faber/plugin-guards': { plugin: Guards as never, needsTools: true },
  '@faber/plugin-approval': { plugin: Approval as never },
  'TerminalAnswerer (@faber/plugin-approval)': { plugin: TerminalAnswerer as never, needs: Approval },
  'WebAnswerer (@faber/plugin-approval)': { plugin: WebAnswerer as never, needs: Approval },
  '@faber/plugin-fs-observation': { plugin: FsObservation as never, needsTools: true },
  '@faber/plugin-tools-fs': { plugin: ToolsFs as never, base: { root: tmpdir() }, needsTools: true },
  '@faber/plugin-tools-shell': { plugin: ToolsShell as never, base: { root: tmpdir() }, needsTools: true },
  '@faber/plugin-tool-cordis': { plugin: Inspector as never, needsTools: true },
  '@faber/plugin-mcp': { plugin: Mcp as never, needsTools: true },
  '@faber/plugin-otel': { plugin: Otel as never, needsTools: true },
  '@faber/sandbox': { plugin: WorkerSandbox as never },
  '@faber/sandbox-isolate': { plugin: IsolateSandbox as never },
  '@faber/store': { plugin: DeploymentStore as never, base: { path: STORE } },
}

/** a likely slip of the keyboard: two neighbouring letters swapped, or a letter doubled when that changes nothing */
function misspell(key: string): string {
  for (let i = 1; i < key.length - 1; i++) {
    if (key[i] !== key[i + 1]) return key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2)
  }
  return `${key}${key.at(-1)}`
}

async function startError(subject: Subject, config: Record<string, unknown>): Promise<Error | undefined> {
  const ctx = new Context()
  if (subject.needsTools) ctx.plugin(ToolRuntime)
  if (subject.needs) ctx.plugin(subject.needs as never)
  ctx.plugin(subject.plugin as never, config)
  try {
    await assertStarted(ctx)
  } catch (error) {
    return error as Error
  } finally {
    await ctx.stop()
  }
}

describe('strict configuration of every plugin', () => {
  after(() => Promise.all(['', '-wal', '-shm', '-journal'].map((suffix) => rm(`${STORE}${suffix}`, { force: true }))))

  for (const [label, subject] of Object.entries(subjects)) {
    const keys = Object.keys(subject.plugin.Config.dict ?? {})
    it(`${label}: each misspelt top-level key is refused with the key it meant (${keys.join(', ')})`, async () => {
      expect(keys).to.not.be.empty
      for (const key of keys) {
        const typo = misspell(key)
        const error = await startError(subject, { ...subject.base, [typo]: 1 })
        expect(error?.message, `${label}: ${typo}`).to.match(/^plugin ".+" failed to start: /)
        expect(error?.message, `${label}: ${typo}`).to.contain(`\`${typo}\`: unknown key; did you mean \`${key}\`?`)
      }
      expect(await startError(subject, { ...subject.base })).to.equal(undefined)
    })
  }

  it('nested keys too: a rule inside deny', async () => {
    const error = await startError(subjects['@faber/plugin-guards'], { deny: [{ tools: ['write'], resaon: 'no writes' }] })
    expect(error?.message).to.equal('plugin "guards" failed to start: `deny[0].resaon`: unknown key; did you mean `reason`?')
  })
})

/**
 * every object a plugin's Config holds below its top level, however it is reached (a field, an array item, a dict
 * value, a branch of a union), each with `wrap`, which builds a whole config holding a given object there, and the key
 * path a deployer would read
 */
function* nestedObjects(
  schema: Schema,
  wrap: (inner: unknown) => unknown = (v) => v,
  path = '',
): Generator<{ path: string; keys: string[]; wrap: (inner: unknown) => unknown }> {
  switch (schema.type) {
    case 'object':
      if (path) yield { path, keys: Object.keys(schema.dict ?? {}), wrap }
      for (const [key, inner] of Object.entries(schema.dict ?? {})) {
        yield* nestedObjects(inner, (v) => wrap({ [key]: v }), path ? `${path}.${key}` : key)
      }
      return
    case 'array':
      return yield* nestedObjects(schema.inner!, (v) => wrap([v]), `${path}[0]`)
    case 'dict':
      return yield* nestedObjects(schema.inner!, (v) => wrap({ name: v }), `${path}.name`)
    case 'union':
    case 'intersect':
      for (const branch of schema.list ?? []) yield* nestedObjects(branch, wrap, path)
      return
    case 'transform':
      return yield* nestedObjects(schema.inner!, wrap, path)
  }
}

describe('strict configuration at every depth of every plugin', () => {
  for (const [label, subject] of Object.entries(subjects)) {
    const nested = [...nestedObjects(subject.plugin.Config)]
    if (!nested.length) continue
    it(`${label}: a misspelt key in any nested object is refused with its path and the key it meant (${nested.map((n) => n.path).join(', ')})`, () => {
      for (const { path, keys, wrap } of nested) {
        expect(keys, path).to.not.be.empty
        for (const key of keys) {
          const typo = misspell(key)
          const refused = (() => {
            try {
              subject.plugin.Config(wrap({ [typo]: 1 }) as never)
            } catch (error) {
              return (error as Error).message
            }
          })()
          expect(refused, `${label}: ${path}.${typo}`).to.equal(`\`${path}.${typo}\`: unknown key; did you mean \`${key}\`?`)
        }
      }
    })
  }

  it('every plugin with nested settings is covered', () => {
    const covered = Object.entries(subjects)
      .filter(([, subject]) => [...nestedObjects(subject.plugin.Config)].length)
      .map(([label]) => label)
    expect(covered).to.include.members([
      '@faber/plugin-guards',
      '@faber/plugin-approval',
      '@faber/plugin-mcp',
      '@faber/plugin-tools-shell',
      '@faber/plugin-tool-cordis',
    ])
  })
})

describe('strict configuration in a deployment file (faber as a child process)', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-strict-'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  for (const command of ['inspect', 'mcp']) {
    it(`faber ${command} exits 2 naming the file, the line, the key path and the key it meant`, async () => {
      const file = join(dir, 'deploy.yml')
      await writeFile(
        file,
        ['mode: code', 'plugins:', "  '@faber/plugin-guards':", '    dney:', '      - { tools: [write], reason: no writes }', ''].join('\n'),
      )
      const ran = await faber([command, file])
      expect(ran.code).to.equal(2)
      expect(ran.stderr.trim()).to.equal(`${file}:4: plugins["@faber/plugin-guards"].dney: unknown key; did you mean \`deny\`?`)
      expect(ran.stdout).to.equal('')
    })
  }

  it('a nested misspelling is reported on its own line', async () => {
    const file = join(dir, 'deploy.yml')
    await writeFile(
      file,
      [
        'plugins:',
        "  '@faber/plugin-guards':",
        '    deny:',
        '      - tools: [write]',
        '        resaon: no writes',
        "  '@faber/sandbox': { poolSise: 2 }",
        '',
      ].join('\n'),
    )
    const ran = await faber(['inspect', file])
    expect(ran.code).to.equal(2)
    // and the next plugin's misspelling too: every problem of the file at once
    expect(ran.stderr.trim().split('\n')).to.deep.equal([
      `${file}:5: plugins["@faber/plugin-guards"].deny[0].resaon: unknown key; did you mean \`reason\`?`,
      `${file}:6: plugins["@faber/sandbox"].poolSise: unknown key; did you mean \`poolSize\`?`,
    ])
  })

  it("an agent's plugin, a misspelt required key inside a union (mcp's sampling model)", async () => {
    const file = join(dir, 'deploy.yml')
    await writeFile(
      file,
      ['mode: code', 'agents:', '  - name: main', '    plugins:', "      '@faber/plugin-mcp':", '        sampling:', '          mdoel: gpt-4o', ''].join('\n'),
    )
    const ran = await faber(['inspect', file])
    expect(ran.code).to.equal(2)
    expect(ran.stderr.trim()).to.equal(`${file}:7: agents[0].plugins["@faber/plugin-mcp"].sampling.mdoel: unknown key; did you mean \`model\`?`)
  })
})

describe('a deployment with a plugin that did not start does not run', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-failed-'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('startDeployment throws a PluginStartError naming the plugin and stops the context', async () => {
    const ctx = new Context()
    ctx.plugin(ToolRuntime)
    ctx.plugin(Guards as never, { breaker: { remindAfter: 5, blockAfter: 2 } })
    const error = await startDeployment(ctx).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(error).to.be.instanceOf(PluginStartError)
    expect((error as PluginStartError).plugin).to.equal('guards')
    expect((error as Error).message).to.contain('breaker.blockAfter (2) must be greater than breaker.remindAfter (5)')
    expect(ctx.get('tools')).to.equal(undefined)
  })

  it('startDeployment names a plugin that threw a value with no prototype, and stops the context', async () => {
    // what a plugin throws is read host-safely: String() of a prototype-less value throws, which used to replace the
    // PluginStartError with a TypeError that named no plugin
    const ctx = new Context()
    ctx.plugin(ToolRuntime)
    ctx.plugin({
      name: 'odd-thrower',
      apply() {
        throw Object.create(null)
      },
    })
    const error = await startDeployment(ctx).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(error).to.be.instanceOf(PluginStartError)
    expect((error as PluginStartError).plugin).to.equal('odd-thrower')
    expect((error as Error).message).to.equal('plugin "odd-thrower" failed to start: an error that could not be shown')
    expect(ctx.get('tools')).to.equal(undefined)
  })

  for (const command of ['run', 'chat', 'mcp', 'inspect']) {
    it(`faber ${command} exits 2 naming the plugin, where it is in the file, and the reason, without a stack dump`, async () => {
      const file = join(dir, 'deploy.yml')
      await writeFile(
        file,
        ['mode: code', 'agents:', '  - name: main', '    plugins:', `      '@faber/plugin-tools-fs': { root: '${dir}/missing' }`, ''].join('\n'),
      )
      const ran = await faber([command, file])
      expect(ran.code).to.equal(2)
      expect(ran.stderr.trim()).to.equal(
        `${file}:5: agents[0].plugins["@faber/plugin-tools-fs"]: plugin "tools-fs" failed to start: ` +
          `tools-fs: the workspace root "${dir}/missing" does not exist; create it or fix the root option`,
      )
      // inspect shows the deployment it could compose, not in force; the others print nothing
      if (command === 'inspect') expect(ran.stdout).to.contain('DEPLOYMENT NOT IN FORCE').and.contain('NOT IN FORCE: tools-fs (failed)')
      else expect(ran.stdout).to.equal('')
    })
  }
})
