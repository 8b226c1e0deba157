// the plugin contract (README "Writing a plugin", STYLE): one module shape for plugins, one class shape for services,
// `Config` and `ConfigInput` by those names, schemas checked rather than cast, each cordis event declared once

import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import ToolRuntime from '@faber/core'
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

describe('the plugin contract', () => {
  for (const [label, module] of Object.entries(modules)) {
    it(`${label}: exports name, inject, Config and apply, and a default of exactly those (and reusable)`, () => {
      expect(module.name, 'name').to.be.a('string')
      expect(module.inject, 'inject').to.exist
      expect(isSchema(module.Config), 'Config is a schema').to.equal(true)
      expect(module.apply, 'apply').to.be.a('function')
      const members = ['name', 'inject', 'reusable', 'Config', 'apply'].filter((key) => key in module)
      expect(module.default).to.deep.equal(Object.fromEntries(members.map((key) => [key, module[key]])))
      for (const key of members) expect((module.default as Record<string, unknown>)[key], key).to.equal(module[key])
    })
  }

  for (const [label, service] of Object.entries(services)) {
    it(`${label}: a default-exported Service class with its Config schema`, () => {
      expect((service as unknown as { prototype: unknown }).prototype instanceof Service, 'extends Service').to.equal(true)
      expect(isSchema(service.Config), 'Config is a schema').to.equal(true)
    })
  }

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
