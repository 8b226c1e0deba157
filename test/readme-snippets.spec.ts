// every fenced block of every README.md (root, packages/*, plugins/*, examples/*) is accounted for here, taken from
// the README text itself so that a changed snippet is checked as changed:
// - TypeScript is type-checked as written (a fragment gets only declarations of the names it assumes, e.g. `ctx`);
// - a deployment file (YAML) goes through the CLI's own loader: parsed, checked, every plugin imported and its
//   config checked against the plugin's Config;
// - commands run as child processes as written, and an output block is compared with what its command prints;
// - a block another spec already exercises from the README text names that spec; the rest are exempt, with the
//   reason next to them. A block not listed in PLAN fails the first test: a new snippet needs a way to be checked.
//
// Inline commands (`faber …`, `pnpm …`, `node …` in prose and tables) are checked for what they name: the faber
// command and every flag (against that command's --help), the file, the bench, the script, the package. They are run
// as children elsewhere, with a free port (127.0.0.1:0) where the README shows a fixed one (7070), which parallel
// runs would fight over:
// - `faber inspect … --web`, `faber demo --web`: packages/cli/tests/inspect-web.spec.ts
// - `faber mcp login|logout`: packages/cli/tests/mcp-login.spec.ts, against a local OAuth server on 127.0.0.1 (the
//   READMEs' providers, docs.example.com and the like, are remote: the YAML naming them is loaded below, not signed in)
// - `faber run`, `faber chat`: packages/cli/tests/model-server.spec.ts, against a local model server
// - `faber mcp`, `--http`: packages/cli/tests/mcp.spec.ts; `npx faber demo`: test/packaging.spec.ts
// - `pnpm bench …`: benchmarks, not run by tests (their files must exist, and a variable set before the command, as in
//   `NESTED_PART=first pnpm bench nested`, must be one the bench reads, with a value its text names), except
//   `pnpm bench fs-race`, whose figures must be 0: test/fs-race.spec.ts runs it as written, short

import { execFile, spawn } from 'node:child_process'
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import ts from 'typescript'
import { loadPlugins, parseDeployment } from '../packages/cli/src/deployment.ts'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const BIN = join(ROOT, 'packages/cli/bin/faber.mjs')
// generous: a child is only killed if it hangs; nothing here asserts on time
const CHILD_TIMEOUT = 240_000

interface Block {
  file: string // relative to ROOT
  line: number // of the opening fence
  lang: string
  text: string
  key: string // file + first line: how PLAN names it
}

async function readmes(): Promise<string[]> {
  const files = ['README.md']
  for (const group of ['packages', 'plugins', 'examples']) {
    for (const name of (await readdir(join(ROOT, group))).sort()) {
      const file = `${group}/${name}/README.md`
      if (
        await readFile(join(ROOT, file)).then(
          () => true,
          () => false,
        )
      )
        files.push(file)
    }
  }
  return files
}

/** the fenced blocks of a README, indented ones (inside a list item) with their indentation taken off */
function blocks(file: string, text: string): Block[] {
  const found: Block[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)```(\w*)\s*$/.exec(lines[i])
    if (!open) continue
    const indent = open[1].length
    const body: string[] = []
    let j = i + 1
    while (j < lines.length && !/^ *```\s*$/.test(lines[j])) body.push(lines[j++].slice(indent))
    const first = body.find((l) => l.trim())?.trim() ?? ''
    found.push({ file, line: i + 1, lang: open[2], text: `${body.join('\n')}\n`, key: `${file}: ${first}` })
    i = j
  }
  return found
}

async function allBlocks(): Promise<Block[]> {
  const all: Block[] = []
  for (const file of await readmes()) all.push(...blocks(file, await readFile(join(ROOT, file), 'utf8')))
  return all
}

type Plan =
  // also: a spec that runs it; imports: a module name the block imports that stands for another block (its key)
  | { typecheck: true; prelude?: string; also?: string; imports?: Record<string, string> }
  | { deployment: true }
  | { run: true } // a command (or an output block) the `runs` tests below execute
  | { spec: string } // exercised, from the README text, by that spec
  | { exempt: string }

// the root README's plugin, which its test-kit example imports as 'my-plugin'
const PLUGIN = "README.md: import { defineConfig, type Execution } from '@faber/core'"
const CTX = `import type { Context } from 'cordis'\ndeclare const ctx: Context\n`
const NOTATION =
  'an API summary in signature notation (`x?`, `a | b`, `→`), not a program; the calls it names are type-checked in the program blocks of the same README and exercised by the package specs'

const PLAN: Record<string, Plan> = {
  // root
  'README.md: ✗ write UNKNOWN_TOOL 1 ms': { spec: 'test/readme.spec.ts' },
  'README.md: bash scripts/bootstrap && pnpm demo    # the main job: the demo deployment on its embedded scripted model': {
    spec: 'test/readme.spec.ts',
  },
  'README.md: pnpm tarballs ~/faber-tarballs        # in the clone, after bash scripts/bootstrap: builds, packs the 14 packages': {
    spec: 'test/packaging.spec.ts',
  },
  'packages/sandbox/README.md: // my-backend.spec.mjs, run with `npx mocha my-backend.spec.mjs`': { spec: 'test/packaging.spec.ts' },
  "README.md: import { Context } from 'cordis'": { typecheck: true },
  "README.md: import { defineConfig, type Execution } from '@faber/core'": { typecheck: true },
  "README.md: import { call, deployment, disposeAll, echoTool } from '@faber/core/testing'": {
    typecheck: true,
    imports: { 'my-plugin': PLUGIN },
  },
  // examples
  'examples/agent-presets/README.md: pnpm --filter @faber/example-agent-presets start': { run: true },
  'examples/agent-presets/README.md: agent alice (chain alice → reviewer)': { run: true },
  'examples/custom-guard/README.md: pnpm exec tsx examples/custom-guard/src/main.ts': { run: true },
  'examples/custom-guard/README.md: a secret in the arguments:': { run: true },
  "examples/custom-guard/README.md: import * as SecretsGuard from '@faber/example-custom-guard'": {
    typecheck: true,
    prelude: `${CTX}import type { Agent } from '@faber/core'\ndeclare const agent: Agent\n`,
  },
  'examples/quickstart/README.md: pnpm --filter @faber/example-quickstart start': { run: true },
  'examples/quickstart/README.md: native-agent (native)                       code-agent (code)': { run: true },
  // packages
  "packages/agent/README.md: import { Context } from 'cordis'": { typecheck: true },
  "packages/agent/README.md: import type {} from '@faber/agent' // brings the event's type": { typecheck: true, prelude: CTX },
  'packages/cli/README.md: pnpm demo                                   # = faber demo, the main job': { run: true },
  "packages/cli/README.md: mode: code                          # native | code | both (the core's default mode)": { deployment: true },
  'packages/cli/README.md: model: { provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: ANTHROPIC_API_KEY }': { deployment: true },
  'packages/cli/README.md: faber grants import grants.json --store state/faber.db   # add (or replace by id) the grants of an export': {
    run: true,
  },
  'packages/cli/README.md: faber demo --log session.jsonl                                    # record a session with the demo deployment': {
    run: true,
  },
  'packages/cli/README.md: faber replay: 10 call(s) from 1 log(s) through examples/replay/stricter.yml': { run: true },
  "packages/core/README.md: import { readFile } from 'node:fs/promises'": { typecheck: true },
  "packages/core/README.md: import { emitEach, listenersFor } from '@faber/core'": { typecheck: true },
  "packages/sandbox-isolate/README.md: import { Context } from 'cordis'": { typecheck: true },
  "packages/sandbox-quickjs/README.md: import { Context } from 'cordis'": { typecheck: true },
  "packages/sandbox/README.md: import { Context } from 'cordis'": { typecheck: true },
  "packages/sandbox/README.md: import { WorkerSandbox } from '@faber/sandbox'": { typecheck: true },
  'packages/store/README.md: plugins:': { deployment: true },
  "packages/store/README.md: import DeploymentStore from '@faber/store'": { typecheck: true, prelude: CTX },
  "packages/store/README.md: import { openStore } from '@faber/store'": { exempt: NOTATION },
  'packages/store/README.md: # deployment.yml, the same file on each of the three hosts': { deployment: true },
  "packages/store/README.md: FABER_STORE_URL='postgres://faber:secret@db.internal:5432/faber' faber mcp deployment.yml --http 8080": {
    exempt:
      "it names a database server on another host; packages/cli/tests/grants.spec.ts and the plugins' PostgreSQL specs run the store against a real server",
  },
  // plugins
  'plugins/approval/README.md: ctx.approval.request({ agent, tool, arguments, callId, reason, program?, signal, exec })': { exempt: NOTATION },
  "plugins/approval/README.md: import ToolRuntime, { defineTool, t } from '@faber/core'": { typecheck: true },
  "plugins/approval/README.md: ctx.on('approval/request', async (query) => {": {
    typecheck: true,
    prelude: `${CTX}import type {} from '@faber/plugin-approval'\n`,
  },
  'plugins/approval/README.md: const approval = ctx.approval as Approval': { exempt: NOTATION },
  "plugins/approval/README.md: import { GrantStore } from '@faber/plugin-approval'": {
    typecheck: true,
    prelude: 'declare const data: unknown\ndeclare const replace: boolean\n',
  },
  'plugins/approval/README.md: ctx.plugin(Approval, {': { typecheck: true, prelude: `${CTX}import Approval from '@faber/plugin-approval'\n` },
  "plugins/approval/README.md: import { TerminalAnswerer } from '@faber/plugin-approval'": { exempt: NOTATION },
  "plugins/approval/README.md: import { WebAnswerer } from '@faber/plugin-approval'": { typecheck: true, prelude: CTX },
  "plugins/fs-observation/README.md: import ToolRuntime, { createAgent } from '@faber/core'": { typecheck: true },
  'plugins/fs-observation/README.md: plugins:': { deployment: true },
  "plugins/guards/README.md: import ToolRuntime, { defineTool, t } from '@faber/core'": { typecheck: true },
  "plugins/mcp/README.md: import ToolRuntime, { createAgent } from '@faber/core'": { typecheck: true },
  'plugins/mcp/README.md: plugins:': { deployment: true },
  'plugins/mcp/README.md: serveMcp(ctx, {': { exempt: NOTATION },
  'plugins/mcp/README.md: cd plugins/mcp/tests   # see below': { run: true },
  "plugins/otel/README.md: import ToolRuntime, { defineTool, t } from '@faber/core'": { typecheck: true, also: 'plugins/otel/tests/readme.spec.ts' },
  "plugins/tool-cordis/README.md: import { Context } from 'cordis'": { typecheck: true },
  "plugins/tool-cordis/README.md: agent coder: mode code (this agent's presentAs)": { run: true },
  "plugins/tools-fs/README.md: import ToolRuntime from '@faber/core'": { typecheck: true },
  "plugins/tools-fs/README.md: 'fs/expected-version'(exec: Execution, path: string): string | undefined  // may be async": { exempt: NOTATION },
  "plugins/tools-shell/README.md: import ToolRuntime from '@faber/core'": { typecheck: true, also: 'plugins/tools-shell/tests/readme.spec.ts' },
}

// program blocks that run on their own, and what is checked of their output beyond ending with exit code 0
// (approval's, which prompts at a terminal, has a test of its own; mcp's starts servers from npm and serves stdio until its client leaves; otel's
// and tools-shell's are run by their own readme specs)
const RUNS: Record<string, 'exit 0' | 'comment lines' | 'trailing comments'> = {
  "README.md: import { Context } from 'cordis'": 'exit 0',
  "packages/core/README.md: import { readFile } from 'node:fs/promises'": 'exit 0',
  "packages/core/README.md: import { emitEach, listenersFor } from '@faber/core'": 'comment lines',
  "packages/agent/README.md: import { Context } from 'cordis'": 'exit 0',
  "packages/sandbox/README.md: import { Context } from 'cordis'": 'exit 0',
  "packages/sandbox/README.md: import { WorkerSandbox } from '@faber/sandbox'": 'exit 0',
  "packages/sandbox-isolate/README.md: import { Context } from 'cordis'": 'exit 0',
  "packages/sandbox-quickjs/README.md: import { Context } from 'cordis'": 'exit 0',
  "plugins/tools-fs/README.md: import ToolRuntime from '@faber/core'": 'comment lines',
  "plugins/fs-observation/README.md: import ToolRuntime, { createAgent } from '@faber/core'": 'comment lines',
  "plugins/guards/README.md: import ToolRuntime, { defineTool, t } from '@faber/core'": 'trailing comments',
}

function block(all: Block[], key: string): Block {
  const found = all.filter((b) => b.key === key)
  expect(found, key).to.have.length(1)
  return found[0]
}

/** runs a command; resolves with its output whatever the exit code */
function run(command: string, args: string[], options: { cwd: string; env?: Record<string, string> }) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      command,
      args,
      { cwd: options.cwd, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '', ...options.env }, timeout: CHILD_TIMEOUT, maxBuffer: 64 << 20 },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
    )
  })
}

/** the README's output lines appear in `printed`, in order; `…` in the README stands for anything */
function expectLines(shown: string, printed: string, normalize: (line: string) => string = (l) => l) {
  const out = printed.split('\n').map((l) => normalize(l.trimEnd()))
  let at = 0
  for (const line of shown.split('\n').filter((l) => l.trim())) {
    const pattern = new RegExp(
      `^${normalize(line.trimEnd())
        .split('…')
        .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*')}$`,
    )
    const found = out.findIndex((l, i) => i >= at && pattern.test(l))
    expect(found, `"${line}" (in this order) in:\n${printed}`).to.be.greaterThan(-1)
    at = found + 1
  }
}

/** the inline code spans of a README (outside fenced blocks) that are command lines */
// `NAME=value ` or `NAME='a value' ` at the start of an inline command
const ASSIGNMENT = /^([A-Z][A-Z0-9_]*)=('[^']*'|"[^"]*"|\S+)\s+/
const COMMAND = new RegExp(`^(${ASSIGNMENT.source.slice(1)})*(pnpm|npx faber|faber|node) `)

function inlineCommands(file: string, text: string): { file: string; line: number; command: string }[] {
  const found: { file: string; line: number; command: string }[] = []
  let fenced = false
  for (const [i, line] of text.split('\n').entries()) {
    if (/^ *```/.test(line)) fenced = !fenced
    if (fenced) continue
    for (const match of line.matchAll(/`([^`]+)`/g)) {
      // a table cell escapes its pipes; a span quoted inside a message ends in an escaped backtick
      const command = match[1].replaceAll('\\|', '|').replace(/\\$/, '').trim()
      // environment assignments before the command (`NESTED_PART=first pnpm bench nested`) are part of it
      if (COMMAND.test(command) || command === 'faber') found.push({ file, line: i + 1, command })
    }
  }
  return found
}

// inline commands that name a file in another directory than the README's or the root, as their sentence says
const ELSEWHERE: Record<string, string> = {
  'node --import tsx serve.ts code': 'plugins/mcp/tests/fixtures', // "`tests/fixtures/serve.ts` ... served this way"
}

// pnpm's own commands and the root package's scripts
const PNPM_BUILTIN = ['pack', 'publish', 'install', 'exec', 'test']

describe('README snippets', function () {
  this.timeout(600_000)
  let all: Block[]
  before(async () => {
    all = await allBlocks()
  })

  it('every fenced block of every README is planned, and every plan names a block', async () => {
    const unplanned = all.filter((b) => !PLAN[b.key]).map((b) => `${b.file}:${b.line} ${JSON.stringify(b.key)}`)
    expect(unplanned, 'blocks with no way to check them: add each to PLAN').to.deep.equal([])
    const keys = new Set(all.map((b) => b.key))
    expect(
      Object.keys(PLAN).filter((k) => !keys.has(k)),
      'plans of blocks no README has any more',
    ).to.deep.equal([])
    for (const key of Object.keys(PLAN))
      expect(
        all.filter((b) => b.key === key),
        key,
      ).to.have.length(1)
    for (const plan of Object.values(PLAN)) {
      const spec = 'spec' in plan ? plan.spec : 'also' in plan ? plan.also : undefined
      if (!spec) continue
      // a spec named here reads its README
      expect(await readFile(join(ROOT, spec), 'utf8'), spec).to.match(/README/)
    }
  })

  it('every inline command names what exists: faber flags its --help lists, files, benchmarks, scripts, packages', async () => {
    const spans = []
    for (const file of await readmes()) spans.push(...inlineCommands(file, await readFile(join(ROOT, file), 'utf8')))
    expect(spans.length).to.be.greaterThan(50)
    const rootScripts = Object.keys(JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')).scripts)
    const helps = new Map<string, Promise<string>>()
    const help = (command: string) => {
      let text = helps.get(command)
      if (!text) {
        text = run(process.execPath, [BIN, ...(command ? [command] : []), '--help'], { cwd: ROOT }).then((r) => {
          expect(r.code, `faber ${command} --help: ${r.stderr}`).to.equal(0)
          return r.stdout
        })
        helps.set(command, text)
      }
      return text
    }
    const exists = (path: string) =>
      readFile(path).then(
        () => true,
        () => false,
      )
    const problems: string[] = []
    for (const { file, line, command } of spans) {
      const at = `${file}:${line} \`${command}\``
      const env: [string, string][] = []
      let rest = command
      for (let m = ASSIGNMENT.exec(rest); m; m = ASSIGNMENT.exec(rest)) {
        env.push([m[1], m[2].replace(/^(['"])(.*)\1$/, '$2')])
        rest = rest.slice(m[0].length)
      }
      const words = rest.split(/\s+/)
      const faberAt = words.indexOf('faber')
      if (faberAt >= 0 && (words[0] === 'faber' || words.slice(0, faberAt).join(' ') === 'pnpm exec' || words[0] === 'npx')) {
        // a faber command line: its command exists and every flag it shows is one that command's --help lists
        const rest = words.slice(faberAt + 1)
        const sub = ['demo', 'run', 'chat', 'inspect', 'mcp', 'grants', 'replay'].find((c) => rest[0] === c || rest[0]?.startsWith(`${c}`)) ?? ''
        if (rest[0] && !sub && !rest[0].startsWith('-') && rest[0] !== '…') problems.push(`${at}: no command ${rest[0]}`)
        const text = await help(sub)
        for (const flag of rest.filter((w) => w !== '--help').flatMap((w) => w.match(/(?<![\w-])--?[a-z][\w-]*/g) ?? [])) {
          if (!new RegExp(`(^|[\\s\\[(|,])${flag}(?![\\w-])`, 'm').test(text)) problems.push(`${at}: faber ${sub} --help does not list ${flag}`)
        }
        continue
      }
      if (words[0] === 'pnpm' && words[1] === 'bench') {
        for (const name of words.slice(2).filter((w) => !w.startsWith('-'))) {
          const source = await readFile(join(ROOT, 'bench', `${name}.ts`), 'utf8').catch(() => undefined)
          if (source === undefined) {
            problems.push(`${at}: no bench/${name}.ts`)
            continue
          }
          // each variable set before it is one the bench reads, and its value one the bench's text names (a row's
          // label, a part's name, a number)
          for (const [variable, value] of env) {
            if (!source.includes(`process.env.${variable}`)) problems.push(`${at}: bench/${name}.ts does not read ${variable}`)
            else if (!/^\d+$/.test(value) && !source.includes(value)) problems.push(`${at}: bench/${name}.ts names no '${value}' (${variable})`)
          }
        }
        continue
      }
      if (words[0] === 'pnpm' && words[1] === '--filter') {
        const pkg = (await readdir(join(ROOT, 'examples'))).concat().map((d) => `examples/${d}/package.json`)
        let found = false
        for (const manifest of pkg) {
          const json = await readFile(join(ROOT, manifest), 'utf8').then(JSON.parse, () => undefined)
          if (json?.name === words[2] && json.scripts?.[words[3]]) found = true
        }
        if (!found) problems.push(`${at}: no package ${words[2]} with a ${words[3]} script`)
        continue
      }
      const script = words.find((w) => /\.(ts|mjs|js)$/.test(w))
      // "Save as `demo.ts` at the repository root and run `pnpm exec tsx demo.ts`": the README's next block, which
      // the type-check (and, for those that print without a terminal, a run) above covers
      const text = await readFile(join(ROOT, file), 'utf8')
      if (script && text.split('\n')[line - 1].includes(`Save as \`${script}\``)) continue
      if (script) {
        const dirs = [ELSEWHERE[command], dirname(file), '.'].filter((d): d is string => d !== undefined)
        if (!(await Promise.all(dirs.map((d) => exists(join(ROOT, d, script))))).some(Boolean)) problems.push(`${at}: no file ${script}`)
        continue
      }
      if (words[0] === 'pnpm' && !rootScripts.includes(words[1]) && !PNPM_BUILTIN.includes(words[1])) problems.push(`${at}: no script ${words[1]}`)
    }
    expect(problems).to.deep.equal([])
  })

  it('type-checks every TypeScript block as written', async () => {
    const dir = (b: Block) => join(ROOT, dirname(b.file))
    const written: { file: string; block: Block; offset: number }[] = []
    // beside its README, so that packages resolve as they would for that package
    const fileOf = new Map(all.map((b, n) => [b.key, join(dir(b), `.readme-snippet-${process.pid}-${n}.ts`)]))
    try {
      for (const b of all) {
        const plan = PLAN[b.key]
        if (!plan || !('typecheck' in plan)) continue
        expect(b.lang, b.key).to.equal('ts')
        const prelude = plan.prelude ?? ''
        const file = fileOf.get(b.key)!
        let text = b.text
        for (const [name, key] of Object.entries(plan.imports ?? {})) {
          expect(text, b.key).to.include(`from '${name}'`)
          text = text.replace(`from '${name}'`, `from './${relative(dirname(file), fileOf.get(key)!)}'`)
        }
        // `export {}` makes it a module (top-level await) without changing what it declares
        await writeFile(file, `${prelude}${text}export {}\n`)
        written.push({ file, block: b, offset: prelude.split('\n').length - 1 })
      }
      const config = ts.readConfigFile(join(ROOT, 'tsconfig.base.json'), ts.sys.readFile)
      const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT)
      const program = ts.createProgram(
        written.map((w) => w.file),
        options,
      )
      const problems = ts.getPreEmitDiagnostics(program).map((d) => {
        const w = written.find((x) => x.file === d.file?.fileName)
        const message = ts.flattenDiagnosticMessageText(d.messageText, '\n')
        if (!w || d.start === undefined) return `${d.file?.fileName ?? ''} ${message}`
        const { line } = d.file!.getLineAndCharacterOfPosition(d.start)
        // the README's own line number
        return `${w.block.file}:${w.block.line + 1 + line - w.offset}: ${message}`
      })
      expect(problems).to.deep.equal([])
      expect(written.length).to.be.greaterThan(15)
    } finally {
      await Promise.all(written.map((w) => rm(w.file, { force: true })))
    }
  })

  it('loads every deployment file through the CLI loader, plugins and their configs included', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'faber-readme-'))
    try {
      // what the CLI README's file names next to itself
      await writeFile(join(dir, 'my-plugin.mjs'), "export const name = 'my-plugin'\nexport function apply() {}\n")
      let count = 0
      for (const b of all) {
        const plan = PLAN[b.key]
        if (!plan || !('deployment' in plan)) continue
        expect(b.lang, b.key).to.equal('yaml')
        const spec = parseDeployment(b.text, `${b.file}:${b.line}`, dir)
        await loadPlugins(spec)
        count++
      }
      expect(count).to.equal(6)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('loads the deployment-file entries READMEs show inline, as plugins entries through the CLI loader', async () => {
    const entries: { at: string; yaml: string }[] = []
    for (const file of await readmes()) {
      for (const [i, line] of (await readFile(join(ROOT, file), 'utf8')).split('\n').entries()) {
        for (const match of line.matchAll(/`('@faber\/[^'`]+': \{[^`]*\})`/g)) entries.push({ at: `${file}:${i + 1}`, yaml: `plugins:\n  ${match[1]}\n` })
        // a key of the approval service's config, named as "the service's `key: {…}`"
        for (const match of line.matchAll(/the service's `(\w+: \{[^`]*\})`/g)) {
          entries.push({ at: `${file}:${i + 1}`, yaml: `plugins:\n  '@faber/plugin-approval': { ${match[1]} }\n` })
        }
      }
    }
    expect(entries.length).to.be.greaterThan(2)
    for (const { at, yaml } of entries) await loadPlugins(parseDeployment(yaml, at, ROOT))
  })

  describe('runs', () => {
    let dir: string
    beforeEach(async () => {
      dir = await mkdtemp(join(ROOT, 'test/.readme-run-'))
    })
    afterEach(async () => {
      await rm(dir, { recursive: true, force: true })
    })

    it('packages/cli: the three ways to run faber', async () => {
      const lines = block(all, 'packages/cli/README.md: pnpm demo                                   # = faber demo, the main job')
        .text.split('\n')
        .map((l) => l.split('#')[0].trim())
        .filter(Boolean)
      expect(lines).to.deep.equal(['pnpm demo', 'pnpm exec faber inspect deployment.yml --json', 'node packages/cli/bin/faber.mjs --help'])
      // `pnpm demo` is run, output and all, by test/readme.spec.ts and test/demo.spec.ts
      // a deployment.yml in the workspace: the store README's (examples/deployment's shell needs bubblewrap, which
      // test/example-deployment.spec.ts checks for)
      await writeFile(join(dir, 'deployment.yml'), block(all, 'packages/store/README.md: plugins:').text)
      const [pnpm, ...inspectArgs] = lines[1].split(' ')
      const inspected = await run(pnpm, inspectArgs, { cwd: dir })
      expect(inspected.code, inspected.stderr).to.equal(0)
      // the report as one JSON document
      expect(JSON.parse(inspected.stdout)).to.have.property('plugins')
      const [node, ...helpArgs] = lines[2].split(' ')
      const help = await run(node === 'node' ? process.execPath : node, helpArgs, { cwd: ROOT })
      expect(help.code, help.stderr).to.equal(0)
      expect(help.stdout)
        .to.match(/faber/)
        .and.match(/inspect/)
    })

    it('packages/cli: the faber grants commands, in order', async () => {
      const lines = block(
        all,
        'packages/cli/README.md: faber grants import grants.json --store state/faber.db   # add (or replace by id) the grants of an export',
      )
        .text.split('\n')
        .map((l) => l.split('#')[0].trim())
        .filter(Boolean)
      expect(lines).to.have.length(5)
      await mkdir(join(dir, 'state'))
      await writeFile(
        join(dir, 'grants.json'),
        JSON.stringify({ version: 1, grants: [{ id: 'no-deploy', tool: 'deploy', decision: 'reject', createdAt: '2026-01-01T00:00:00.000Z', by: 'test' }] }),
      )
      // the deployment the last line names: its store is the same file
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a deployment file's ${dir} substitution
      await writeFile(join(dir, 'deploy.yml'), "plugins:\n  '@faber/store': { path: '${dir}/state/faber.db' }\n")
      const outs: string[] = []
      for (const line of lines) {
        const [faber, ...args] = line.split(/\s+/)
        expect(faber).to.equal('faber')
        const ran = await run(process.execPath, [BIN, ...args], { cwd: dir })
        expect(ran.code, `${line}: ${ran.stderr}`).to.equal(0)
        outs.push(ran.stdout)
      }
      expect(outs[1].split('\n')[0].split(/\s+/)).to.deep.equal(['ID', 'DECISION', 'TOOL', 'AGENT', 'ARGUMENTS', 'BY', 'CREATED'])
      expect(outs[1]).to.match(/^no-deploy\s+reject\s+deploy/m)
      expect(JSON.parse(await readFile(join(dir, 'out.json'), 'utf8'))).to.deep.equal({ version: 1, grants: [] })
      expect(JSON.parse(outs[4])).to.deep.equal({ version: 1, grants: [] })
    })

    it('packages/cli: the replay walk-through, as written, prints the report it shows', async () => {
      const lines = block(
        all,
        'packages/cli/README.md: faber demo --log session.jsonl                                    # record a session with the demo deployment',
      )
        .text.split('\n')
        .map((l) => l.split('#')[0].trim())
        .filter(Boolean)
      expect(lines).to.have.length(3)
      // the example deployments, beside the log the first command writes, as in the repository
      await mkdir(join(dir, 'examples/replay'), { recursive: true })
      for (const file of ['faber.yml', 'stricter.yml']) await writeFile(join(dir, 'examples/replay', file), await readFile(join(ROOT, 'examples/replay', file)))
      const outs: { code: number | null; stdout: string; stderr: string }[] = []
      for (const line of lines) {
        const [faber, ...args] = line.split(/\s+/)
        expect(faber).to.equal('faber')
        outs.push(await run(process.execPath, [BIN, ...args], { cwd: dir }))
      }
      expect(outs.map((o) => o.code)).to.deep.equal([0, 0, 0], outs.map((o) => o.stderr).join('\n'))
      expect(outs[1].stdout).to.contain('10 replayed, 10 unchanged')
      const session = /^session (\S+) ·/m.exec(outs[2].stdout)?.[1]
      expect(session).to.be.a('string')
      const shown = block(all, 'packages/cli/README.md: faber replay: 10 call(s) from 1 log(s) through examples/replay/stricter.yml').text
      expect(outs[2].stdout.replaceAll(`session ${session} `, 'session <id> ').trimEnd()).to.equal(shown.trimEnd())
    })

    it('examples: each start command prints the output its README shows', async () => {
      const examples = [
        [
          'examples/quickstart/README.md: pnpm --filter @faber/example-quickstart start',
          'examples/quickstart/README.md: native-agent (native)                       code-agent (code)',
        ],
        [
          'examples/agent-presets/README.md: pnpm --filter @faber/example-agent-presets start',
          'examples/agent-presets/README.md: agent alice (chain alice → reviewer)',
        ],
        ['examples/custom-guard/README.md: pnpm exec tsx examples/custom-guard/src/main.ts', 'examples/custom-guard/README.md: a secret in the arguments:'],
      ]
      for (const [command, output] of examples) {
        const [program, ...args] = block(all, command).text.trim().split(/\s+/)
        const ran = await run(program, args, { cwd: ROOT })
        expect(ran.code, `${command}: ${ran.stderr}`).to.equal(0)
        expectLines(block(all, output).text, ran.stdout, (l) => l.trimStart().replace(/ {2,}/g, '  '))
      }
    })

    it('the program blocks run to their end, printing what their comments say', async () => {
      // each program beside its README (so its packages resolve as there), run from a directory of its own with the
      // files it names; `/path/to/workspace` is the one placeholder, replaced by that directory
      const tsx = import.meta.resolve('tsx/esm')
      const checked: string[] = []
      for (const [key, expectation] of Object.entries(RUNS)) {
        const b = block(all, key)
        const cwd = await mkdtemp(join(dir, 'cwd-'))
        await writeFile(join(cwd, 'hello.txt'), 'hello world\n')
        await writeFile(join(cwd, 'a.txt'), 'a\n')
        await writeFile(join(cwd, 'b.txt'), 'b\n')
        const script = join(ROOT, dirname(b.file), `.readme-run-${process.pid}.ts`)
        await writeFile(script, b.text.replaceAll('/path/to/workspace', cwd))
        try {
          const ran = await run(process.execPath, ['--no-node-snapshot', '--import', tsx, script], { cwd })
          expect(ran.code, `${key}: ${ran.stderr}`).to.equal(0)
          const text = b.text.replaceAll('/path/to/workspace', cwd)
          if (expectation === 'comment lines') {
            // the lines that are comments of their own: what the program prints, in order
            const shown = text
              .split('\n')
              .filter((l) => l.startsWith('// '))
              .map((l) => l.slice(3))
            expect(shown.length, key).to.be.greaterThan(0)
            expectLines(shown.join('\n'), ran.stdout)
          } else if (expectation === 'trailing comments') {
            // console.log(...) // what it prints; `a / b` is a line after another, `a + b` a line and the next
            const shown = text
              .split('\n')
              .filter((l) => l.includes('console.log(') && l.includes(' // '))
              .flatMap((l) => l.slice(l.indexOf(' // ') + 4).split(/ \/ | \+ /))
            expect(shown.length, key).to.be.greaterThan(0)
            expectLines(shown.join('\n'), ran.stdout)
          }
          checked.push(key)
        } finally {
          await rm(script, { force: true })
        }
      }
      expect(checked).to.have.length(Object.keys(RUNS).length)
    })

    it('plugins/approval: the example asks at a terminal, and a rejection is the second result', async () => {
      const b = block(all, "plugins/approval/README.md: import ToolRuntime, { defineTool, t } from '@faber/core'")
      const prompt = /\/\/ prompts: (.*)$/m.exec(b.text)?.[1]
      const first = /console\.log\(\(await write\('\/tmp\/x'\)\)\.content\)/.test(b.text)
      expect(prompt, 'the comment naming the prompt').to.be.a('string')
      expect(first, 'the allowed call is printed first').to.equal(true)
      const script = join(ROOT, `.readme-run-${process.pid}.ts`) // "at the repository root"
      await writeFile(script, b.text)
      try {
        // a pseudo-terminal (util-linux script), as "in a terminal" says; its .faber/ store goes to the run's directory
        const command = `'${process.execPath}' --import '${import.meta.resolve('tsx/esm')}' '${script}'`
        const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd: dir, env: { ...process.env, NO_COLOR: '1', TERM: 'xterm' } })
        let output = ''
        const closed = new Promise<number | null>((resolve) => child.on('close', resolve))
        const asked = new Promise<void>((resolve) => {
          const seen = (chunk: Buffer) => {
            output += chunk
            if (output.includes(prompt!)) resolve()
          }
          child.stdout.on('data', seen)
          child.stderr.on('data', seen)
        })
        await Promise.race([asked, closed])
        expect(output, 'the question').to.include(prompt!)
        child.stdin.write('n\r')
        expect(await closed, output).to.equal(0)
        const lines = output.replaceAll('\r', '').split('\n')
        expect(lines[0]).to.equal('wrote /tmp/x')
        expect(lines.join('\n')).to.match(/→ rejected\nError: the call to "write" was rejected by the approver/)
      } finally {
        await rm(script, { force: true })
      }
    })

    it('README.md: the test-kit example passes under mocha, against the plugin the README writes', async () => {
      const kit = "README.md: import { call, deployment, disposeAll, echoTool } from '@faber/core/testing'"
      await writeFile(join(dir, 'my-plugin.ts'), block(all, PLUGIN).text)
      await writeFile(join(dir, 'no-dotenv.spec.ts'), block(all, kit).text.replace("from 'my-plugin'", "from './my-plugin.ts'"))
      const ran = await run(process.execPath, [join(ROOT, 'node_modules/mocha/bin/mocha.js'), join(dir, 'no-dotenv.spec.ts')], { cwd: ROOT })
      expect(ran.code, ran.stdout + ran.stderr).to.equal(0)
      expect(ran.stdout).to.match(/1 passed, 0 failed/)
    })

    it('plugins/tool-cordis: the example program prints the report its README shows (timings aside)', async () => {
      const program = block(all, "plugins/tool-cordis/README.md: import { Context } from 'cordis'")
      const output = block(all, "plugins/tool-cordis/README.md: agent coder: mode code (this agent's presentAs)")
      const script = join(ROOT, `plugins/tool-cordis/.readme-run-${process.pid}.ts`)
      await writeFile(script, program.text)
      try {
        const ran = await run(process.execPath, ['--import', 'tsx/esm', script], { cwd: join(ROOT, 'plugins/tool-cordis') })
        expect(ran.code, ran.stderr).to.equal(0)
        expectLines(output.text, ran.stdout, (l) => l.replace(/\d+(\.\d+)?ms\b/g, 'Nms'))
      } finally {
        await rm(script, { force: true })
      }
    })

    it('plugins/mcp: the inspector commands, through bash as written', async () => {
      const commands = block(all, 'plugins/mcp/README.md: cd plugins/mcp/tests   # see below').text
      // the one change: the memory file of this run, instead of the shared /tmp/m.jsonl
      const script = commands.replace('/tmp/m.jsonl', join(dir, 'm.jsonl'))
      expect(script).to.not.equal(commands)
      const ran = await run('bash', ['-e', '-c', script], { cwd: ROOT, env: { npm_config_offline: 'true' } })
      expect(ran.code, ran.stderr).to.equal(0)
      // two JSON documents: the tool list, then the call's result
      const listed = ran.stdout.indexOf('"tools"')
      expect(listed).to.be.greaterThan(-1)
      expect(ran.stdout).to.include('run_code')
      expect(ran.stdout).to.match(/"text": "3"/)
    })
  })
})
