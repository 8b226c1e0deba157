// the plugin contract (README "Writing a plugin", STYLE): one module shape for plugins, one class shape for services,
// `Config` and `ConfigInput` by those names, schemas checked rather than cast, each cordis event declared once

import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import ToolRuntime, { replayRole } from '@faber/core'
import Approval, { TerminalAnswerer, WebAnswerer } from '@faber/plugin-approval'
import * as FsObservation from '@faber/plugin-fs-observation'
import * as Guards from '@faber/plugin-guards'
import * as Mcp from '@faber/plugin-mcp'
import * as Otel from '@faber/plugin-otel'
import Inspector from '@faber/plugin-tool-cordis'
import * as ToolsFs from '@faber/plugin-tools-fs'
import * as ToolsShell from '@faber/plugin-tools-shell'
import WorkerSandbox from '@faber/sandbox'
import IsolateSandbox from '@faber/sandbox-isolate'
import QuickJsSandbox from '@faber/sandbox-quickjs'
import DeploymentStore from '@faber/store'
import { expect } from 'chai'
import { Service } from 'cordis'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')

// every plugin and service names what a deployer writes `ConfigInput`: this fails to compile when one does not
type ConfigInputs = [
  FsObservation.ConfigInput,
  Guards.ConfigInput,
  Mcp.ConfigInput,
  Otel.ConfigInput,
  ToolsFs.ConfigInput,
  ToolsShell.ConfigInput,
  TerminalAnswerer.ConfigInput,
  ToolRuntime.ConfigInput,
  Approval.ConfigInput,
  WebAnswerer.ConfigInput,
  Inspector.ConfigInput,
  DeploymentStore.ConfigInput,
]

const modules: Record<string, Record<string, unknown>> = {
  '@faber/plugin-fs-observation': FsObservation,
  '@faber/plugin-guards': Guards,
  '@faber/plugin-mcp': Mcp,
  '@faber/plugin-otel': Otel,
  '@faber/plugin-tools-fs': ToolsFs,
  '@faber/plugin-tools-shell': ToolsShell,
  'TerminalAnswerer (@faber/plugin-approval)': TerminalAnswerer,
}

const services: Record<string, { Config?: unknown }> = {
  '@faber/core': ToolRuntime,
  '@faber/plugin-approval': Approval,
  'WebAnswerer (@faber/plugin-approval)': WebAnswerer,
  '@faber/plugin-tool-cordis': Inspector,
  '@faber/sandbox': WorkerSandbox,
  '@faber/sandbox-isolate': IsolateSandbox,
  '@faber/sandbox-quickjs': QuickJsSandbox,
  '@faber/store': DeploymentStore,
}

const isSchema = (value: unknown) => typeof value === 'function' && typeof (value as { dict?: unknown }).dict === 'object'

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sources(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

/** every source file of every package and plugin, with its text */
function everySource(): { path: string; text: string }[] {
  return ['packages', 'plugins'].flatMap((group) =>
    readdirSync(join(root, group)).flatMap((pkg) => {
      let files: string[]
      try {
        files = sources(join(root, group, pkg, 'src'))
      } catch {
        return []
      }
      return files.map((file) => ({ path: relative(root, file), text: readFileSync(file, 'utf8') }))
    }),
  )
}

/** code without its comments and string literals, which may say "as" freely */
const code = (text: string) => text.replace(/\/\/.*$/gm, '').replace(/'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|`(?:[^`\\]|\\.)*`/g, "''")

/** the argument of each `defineConfig<…>()(…)` call */
function schemaBlocks(text: string): string[] {
  const blocks: string[] = []
  for (const match of text.matchAll(/defineConfig<[^>]*>\(\)\(/g)) {
    let depth = 1
    let at = match.index + match[0].length
    const start = at
    while (depth > 0 && at < text.length) {
      if (text[at] === '(') depth++
      else if (text[at] === ')') depth--
      at++
    }
    blocks.push(text.slice(start, at - 1))
  }
  return blocks
}

const MODULE_MEMBERS = ['name', 'inject', 'reusable', 'Config', 'apply']

/** what is wrong with a module plugin's shape (none: it has exactly the one shape) */
function moduleProblems(module: Record<string, unknown>): string[] {
  const problems: string[] = []
  if (typeof module.name !== 'string' || !module.name) problems.push('name is not a non-empty string')
  if (!Array.isArray(module.inject) && (typeof module.inject !== 'object' || module.inject === null)) problems.push('inject is missing')
  if (typeof module.reusable !== 'boolean') problems.push('reusable is not a boolean (say false when it is loaded once)')
  if (!isSchema(module.Config)) problems.push('Config is not a schema')
  if (typeof module.apply !== 'function') problems.push('apply is not a function')
  const fallback = module.default as Record<string, unknown> | undefined
  const keys = Object.keys(fallback ?? {}).sort()
  const members = 'replay' in module ? [...MODULE_MEMBERS, 'replay'] : MODULE_MEMBERS
  if (keys.join() !== [...members].sort().join()) problems.push(`the default export has ${keys.join(', ') || 'nothing'}, not ${members.join(', ')}`)
  else for (const key of members) if (fallback?.[key] !== module[key]) problems.push(`default.${key} is not the exported ${key}`)
  return problems
}

/** what is wrong with a service plugin's shape: a Service class with its own static name, inject and Config */
function serviceProblems(service: Record<string, unknown>): string[] {
  const problems: string[] = []
  // every class has a `name` of its own, read-only: a static field declares a writable one. it is the name cordis records
  // for the load whether or not the constructor got to run, which messages and `nonEssential` use
  const named = Object.getOwnPropertyDescriptor(service, 'name')?.writable === true
  if (!named) problems.push('no static name of its own')
  for (const key of ['inject', 'Config']) if (!Object.hasOwn(service, key)) problems.push(`no static ${key} of its own`)
  if (named && (typeof service.name !== 'string' || /^[A-Z]/.test(service.name))) problems.push('static name is not the service name')
  if (!isSchema(service.Config)) problems.push('Config is not a schema')
  return problems
}

// not `instanceof`: cordis' Service.[Symbol.hasInstance] walks constructors, and throws on a function without a prototype
const isService = (value: unknown) =>
  typeof value === 'function' && Object.prototype.isPrototypeOf.call(Service.prototype, (value as { prototype?: object }).prototype ?? {})
const isModule = (value: unknown) => typeof value === 'object' && value !== null && typeof (value as { apply?: unknown }).apply === 'function'

/** every plugin a workspace package exports from its entry: its service classes, and its module plugins (namespaces) */
async function exportedPlugins(): Promise<{ label: string; kind: 'service' | 'module'; value: Record<string, unknown> }[]> {
  const found: { label: string; kind: 'service' | 'module'; value: Record<string, unknown> }[] = []
  for (const group of ['packages', 'plugins']) {
    for (const dir of readdirSync(join(root, group))) {
      const manifest = JSON.parse(readFileSync(join(root, group, dir, 'package.json'), 'utf8')) as { name: string }
      const entry = (await import(manifest.name)) as Record<string, unknown>
      if (isModule(entry)) found.push({ label: manifest.name, kind: 'module', value: entry })
      for (const [key, value] of Object.entries(entry)) {
        if (isService(value) && !found.some((f) => f.value === value)) found.push({ label: `${manifest.name} ${key}`, kind: 'service', value: value as never })
        // a sub-plugin exported as a namespace (export * as TerminalAnswerer); not a module's own default, checked with it
        else if (key !== 'default' && isModule(value) && Object.getPrototypeOf(value) === null)
          found.push({ label: `${manifest.name} ${key}`, kind: 'module', value: value as never })
      }
    }
  }
  // a class other exported services extend (the sandbox's SandboxService) is their base, not a plugin of its own
  return found.filter((f) => !found.some((other) => Object.getPrototypeOf(other.value) === f.value))
}

describe('the plugin contract', () => {
  for (const [label, module] of Object.entries(modules)) {
    it(`${label}: exports name, inject, reusable, Config and apply, and a default of exactly those`, () => {
      expect(moduleProblems(module)).to.deep.equal([])
    })
  }

  for (const [label, service] of Object.entries(services)) {
    it(`${label}: a default-exported Service class with its own static name, inject and Config`, () => {
      expect(isService(service), 'extends Service').to.equal(true)
      expect(serviceProblems(service as Record<string, unknown>)).to.deep.equal([])
    })
  }

  it('every plugin any workspace package exports has one of the two shapes', async () => {
    const plugins = await exportedPlugins()
    // the lists above are every plugin: one a package exports without being listed is checked here all the same
    // the lists above are every plugin: one a package exports without being listed fails here
    expect(plugins.filter((p) => p.kind === 'service').map((p) => p.value)).to.have.members(Object.values(services))
    expect(plugins.filter((p) => p.kind === 'module').map((p) => p.value)).to.have.members(Object.values(modules))
    const problems = plugins.flatMap(({ label, kind, value }) =>
      (kind === 'service' ? serviceProblems(value) : moduleProblems(value)).map((problem) => `${label}: ${problem}`),
    )
    expect(problems).to.deep.equal([])
  })

  it('every plugin says what it does in a replay (faber replay refuses one that does not)', async () => {
    // the core is what a replay composes, and the store is held by the replay itself as a copy it never writes
    const own = new Set<unknown>([ToolRuntime, DeploymentStore])
    const silent = (await exportedPlugins()).filter(({ value }) => !own.has(value) && replayRole(value) === undefined).map(({ label }) => label)
    expect(silent).to.deep.equal([])
  })

  it('the shape checks refuse the shapes the repository no longer has', () => {
    const apply = () => {}
    const Config = ToolRuntime.Config
    expect(moduleProblems({ name: 'x', inject: [], Config, apply, default: { name: 'x', inject: [], Config, apply } })).to.deep.equal([
      'reusable is not a boolean (say false when it is loaded once)',
      'the default export has Config, apply, inject, name, not name, inject, reusable, Config, apply',
    ])
    class Unnamed extends Service {
      static inject = ['tools']
      static Config = Config
    }
    class Bare extends Service {
      static Config = Config
    }
    expect(serviceProblems(Unnamed as never)).to.deep.equal(['no static name of its own'])
    expect(serviceProblems(Bare as never)).to.deep.equal(['no static name of its own', 'no static inject of its own'])
  })

  it('names what a deployer writes ConfigInput (a type, checked when this file compiles)', () => {
    const named: ConfigInputs['length'] = 12
    expect(named).to.equal(12)
  })

  it('no schema is cast: nothing in a defineConfig call, and no .default(…), says `as`', () => {
    const casts: string[] = []
    for (const { path, text } of everySource()) {
      const plain = code(text)
      for (const block of schemaBlocks(plain)) {
        for (const hit of block.matchAll(/\bas\s+(?!const\b)[\w{[]+/g)) casts.push(`${path}: defineConfig(… ${hit[0]} …)`)
      }
      for (const hit of plain.matchAll(/\.default\(([^()]|\([^()]*\))*?\bas\s+(?!const\b)\w+/g)) casts.push(`${path}: ${hit[0]}`)
    }
    expect(casts).to.deep.equal([])
  })

  it('every cordis event and service is declared once, by its owner', () => {
    const owners = new Map<string, string[]>()
    for (const { path, text } of everySource()) {
      for (const block of text.matchAll(/declare module 'cordis' \{([\s\S]*?)\n\}/g)) {
        for (const [, key] of block[1].matchAll(/^\s{4}'?([\w/-]+)'?\??[(:]/gm)) owners.set(key, [...(owners.get(key) ?? []), path])
      }
    }
    expect(owners.size).to.be.above(10)
    const twice = [...owners].filter(([, paths]) => paths.length > 1).map(([key, paths]) => `${key}: ${paths.join(', ')}`)
    expect(twice).to.deep.equal([])
  })
})
