// the published form: every publishable package built to dist/ and packed by `pnpm tarballs`, the tarballs installed
// with plain npm into a project outside the workspace, then used as a user would — plain node (no tsx anywhere on the path), the
// `faber` bin through npx, and tsc over a TypeScript consumer of the public types.

import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const PACKAGES = ['packages', 'plugins'].flatMap((group) => readdirSync(join(ROOT, group)).map((name) => join(ROOT, group, name)))

interface Manifest<Export> {
  name: string
  version: string
  engines?: Record<string, string>
  exports: Record<string, Export>
}

const manifest = <Export = string>(dir: string) => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest<Export>

// the sandbox README's spec of a backend of one's own ("Testing a backend"), as written: its `my-backend` is here the packed
// worker sandbox under the names the README gives it
function backendSpec(): string {
  const readme = readFileSync(join(ROOT, 'packages/sandbox/README.md'), 'utf8')
  const block = /```js\n(\/\/ my-backend\.spec\.mjs[\s\S]*?)```/.exec(readme)?.[1]
  if (!block) throw new Error("packages/sandbox/README.md has no block starting '// my-backend.spec.mjs'")
  return block
}
const MY_BACKEND = "export { WorkerSandbox as MySandbox, workerBackend as myBackend } from '@faber/sandbox'\n"

// what a user's shell has: none of the workspace's bins (tsx, tsc) on the path, none of pnpm's npm_* settings
function userEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!/^npm_/i.test(key) && key !== 'NODE_OPTIONS' && key !== 'NODE_PATH') env[key] = value
  env.PATH = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => !dir.startsWith(ROOT))
    .join(delimiter)
  // native addons (better-sqlite3, isolated-vm) compile with node-gyp: use the headers node ships with, no download
  const prefix = join(process.execPath, '..', '..')
  const nodedir = [process.env.npm_config_nodedir, prefix, '/usr', '/usr/local'].find((dir) => dir && existsSync(join(dir, 'include/node/node.h')))
  if (nodedir) env.npm_config_nodedir = nodedir
  env.NO_COLOR = '1'
  // npm's audit and funding notes ask the registry for nothing this test checks
  env.npm_config_audit = 'false'
  env.npm_config_fund = 'false'
  return env
}

// better-sqlite3 and isolated-vm install through prebuild-install: a binary downloaded from GitHub, else a compile from
// source (minutes on 2 cores; this machine reaches only npm). The workspace has compiled the same versions already:
// they are offered as the local prebuilds prebuild-install looks for first, so `npm install` takes the path a user's
// install takes — a prebuilt binary — in seconds. FABER_PACKAGING_COMPILE=1 compiles them instead.
async function offerPrebuilds(dir: string, env: NodeJS.ProcessEnv) {
  const addons = [
    ['packages/store', 'better-sqlite3', 'build/Release/better_sqlite3.node'],
    ['packages/sandbox-isolate', 'isolated-vm', 'out/isolated_vm.node'],
  ]
  await mkdir(dir)
  for (const [owner, name, binary] of addons) {
    const pkg = join(ROOT, owner, 'node_modules', name)
    if (!existsSync(join(pkg, binary))) continue
    const { version } = manifest(pkg)
    const file = `${name}-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`
    await ok('tar', ['czf', join(dir, file), '-C', pkg, binary], { cwd: dir })
    env[`npm_config_${name.replace(/-/g, '_')}_local_prebuilds`] = dir
  }
}

interface Ran {
  code: number | null
  stdout: string
  stderr: string
}

function run(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

async function ok(command: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<Ran> {
  const ran = await run(command, args, options)
  if (ran.code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${ran.code}\n${ran.stdout}\n${ran.stderr}`)
  return ran
}

/** the commands of the root README's "From npm" block, one per line, without their comments */
function fromNpm(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf('## From npm')))?.[1] ?? ''
  return block
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter(Boolean)
}

// core + each sandbox (its default, process-isolated tier) + guards + a guard written here, on plain node; and the
// inspector, whose web view reads files at run time
const SCRIPT = `import ToolRuntime, { defineTool, t } from '@faber/core'
import * as Guards from '@faber/plugin-guards'
import Inspector from '@faber/plugin-tool-cordis'
import Sandbox from '@faber/sandbox'
import IsolateSandbox from '@faber/sandbox-isolate'
import QuickJsSandbox from '@faber/sandbox-quickjs'
import { Context } from 'cordis'

// a third-party guard: nothing but @faber/core's public API
const NoSecrets = {
  name: 'no-secrets',
  inject: ['tools'],
  apply(ctx) {
    ctx.tools.guard((exec) => (exec.name === 'secret' ? 'no-secrets: the secret tool is off limits' : undefined))
  },
}

const code = [
  "const greeting = await tools.greet({ who: 'npm' })",
  'const refused = []',
  "for (const call of [() => tools.secret({ who: 'me' }), () => tools.drop_table({ who: 'all' })]) {",
  '  try { await call() } catch (error) { refused.push(error.message) }',
  '}',
  'return { greeting, refused }',
].join('\\n')

const out = { runs: {} }
for (const Runtime of [Sandbox, IsolateSandbox, QuickJsSandbox]) {
  const ctx = new Context()
  ctx.plugin(ToolRuntime, { mode: 'code' })
  ctx.plugin(Runtime)
  ctx.plugin(Guards, { deny: [{ tools: ['drop_*'], reason: 'never drop anything' }] })
  ctx.plugin(NoSecrets)
  ctx.plugin(Inspector)
  await ctx.start()
  for (const name of ['greet', 'secret', 'drop_table']) {
    ctx.tools.register(
      defineTool({
        name,
        description: name,
        parameters: t.object({ who: t.string() }),
        output: { schema: t.string() },
        execute: ({ who }) => name + ' ' + who,
      }),
    )
  }
  const result = await ctx.tools.execute({ callId: 'c1', name: 'run_code', arguments: { code, description: 'greet, then try two refused tools' }, signal: new AbortController().signal })
  out.runs[ctx.codeRuntime.backend] = { sandbox: ctx.codeRuntime.sandbox.constructor.name, result: result.isError ? result.error : result.value }
  if (!out.page) {
    // the inspector's web view serves its page from files beside dist/
    const view = await ctx.inspector.serve({ port: 0 })
    out.page = await (await fetch(view.url)).text()
    await view.close()
  }
  await ctx.stop()
}
console.log(JSON.stringify(out))
`

// the public types as a TypeScript user meets them: module augmentation of cordis, the typed tool DSL, plugin configs
// both drivers as a user's deployment reaches them: approval's grants kept in a SQLite file and in the PostgreSQL
// database FABER_STORE_URL names, through the packages and the pg and better-sqlite3 npm installed
const STORE_SCRIPT = `import { GrantStore } from '@faber/plugin-approval'
import { openStore } from '@faber/store'
const out = {}
for (const [name, location] of [['file', { path: 'state/faber.db' }], ['server', { urlEnv: 'FABER_STORE_URL' }]]) {
  const store = await openStore(location)
  const grants = new GrantStore(store)
  await grants.import({ version: 1, grants: [{ id: 'ship-it', tool: 'deploy', decision: 'allow' }] })
  out[name] = { driver: store.driver, grants: (await grants.list()).map((grant) => grant.id) }
  await store.close()
}
console.log(JSON.stringify(out))
`

const CONSUMER = `import { AgentSession, ScriptedModel } from '@faber/agent'
import ToolRuntime, { createAgent, defineTool, type Execution, t, type ToolResult } from '@faber/core'
import * as Guards from '@faber/plugin-guards'
import Sandbox, { type CodeRunOutcome } from '@faber/sandbox'
import { Context } from 'cordis'

const ctx = new Context()
ctx.plugin(ToolRuntime, { mode: 'code' })
ctx.plugin(Sandbox, { isolation: 'in-process' })
ctx.plugin(Guards, { deny: [{ tools: ['drop_*'], reason: 'never' }] })

const greet = defineTool({
  name: 'greet',
  description: 'greets',
  parameters: t.object({ who: t.string() }),
  output: { schema: t.string() },
  execute: ({ who }) => who.toUpperCase(),
})
ctx.tools.register(greet)
ctx.tools.guard((exec: Execution) => (exec.name === 'secret' ? 'no' : undefined))

defineTool({
  name: 'wrong',
  description: 'a body that misreads its arguments',
  parameters: t.object({ who: t.string() }),
  output: { schema: t.string() },
  // @ts-expect-error who is a string: the DSL's types survive packing
  execute: ({ who }) => who.toFixed(),
})

const agent = createAgent(ctx, { name: 'main' })
const session = new AgentSession(ctx, { agent, model: new ScriptedModel([{ text: 'hi' }]) })
export const pending: Promise<ToolResult> = ctx.tools.execute({ callId: 'c', name: 'greet', arguments: { who: 'x' }, signal: new AbortController().signal })
export const outcome: CodeRunOutcome | undefined = undefined
session.dispose()
`

// Koishi from npm, with the example bot (examples/koishi/app.mjs) driven through Koishi's own mock client
const KOISHI = ['koishi@4.18.11', '@koishijs/plugin-mock@2.6.6']
const KOISHI_DRIVER = `import { createBot } from './koishi-app.mjs'

const app = await createBot()
const client = app.mock.client('alice')
const out = {}
const ask = async (message) => (await client.receive(message)).join('\\n')
out.tool = await ask('tool echo hello')
out.guarded = await ask('tool drop_table users')
out.approval = await ask('tool pay 10 EUR')
out.collapsed = await ask('tool -c echo hello')
out.program = await ask("code const a = await tools.echo({ text: 'a' }); const b = await tools.echo({ text: 'b' }); return [a.echoed, b.echoed]")
out.middleware = await ask('ping')
// a plugin of the Koishi app that fails to start: Faber runs no tool until it is disposed
const broken = app.plugin({ name: 'broken-policy', apply() { throw new Error('its rules cannot be read') } })
await app.lifecycle.flush()
out.failed = await ask('tool echo hello')
broken.dispose()
out.restored = await ask('tool echo hello')
console.log(JSON.stringify(out))
// the sandbox's workers end with the process; Koishi's mock bot logs an error of its own when the app stops
process.exit(0)
`

describe('packages installed from npm', function () {
  // a cold npm cache and two native addons compiled from source (better-sqlite3, isolated-vm) take minutes on 2 cores
  this.timeout(15 * 60_000)
  let temp: string
  let project: string
  let packed: string
  let tarballs: string[]
  let installed: Ran
  const env = userEnv()

  before(async () => {
    temp = await mkdtemp(join(tmpdir(), 'faber-packaging-'))
    // the root README's commands as written, with its tarball folder in the temporary directory
    const [tarballsLine, projectLine, installLine, ...more] = fromNpm()
    expect(more, 'the From npm block has three commands').to.deep.equal([])
    packed = join(temp, 'faber-tarballs')
    const sh = (line: string, cwd: string) => ok('sh', ['-c', line.replaceAll('~/faber-tarballs', packed)], { cwd, env })
    await sh(tarballsLine, ROOT)
    tarballs = (await readdir(packed)).filter((f) => f.endsWith('.tgz')).sort()
    await sh(projectLine, temp)
    project = join(temp, 'my-project')
    // what the type-check below needs, beside what the README installs
    const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
    const created = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'))
    const dev = ['typescript', '@types/node', 'mocha', 'chai', '@types/mocha', '@types/chai']
    created.devDependencies = Object.fromEntries(dev.map((name) => [name, root.devDependencies[name]]))
    await writeFile(join(project, 'package.json'), JSON.stringify(created, null, 2))
    if (!process.env.FABER_PACKAGING_COMPILE) await offerPrebuilds(join(temp, 'prebuilds'), env)
    installed = await sh(installLine, project)
  })

  after(async function () {
    // every test passed on these tarballs: a publish of the same bytes is allowed (scripts/packaging-check.mjs)
    const tests = this.test?.parent?.tests ?? []
    if (tests.length && tests.every((test) => test.state === 'passed'))
      await ok(process.execPath, ['scripts/packaging-check.mjs', 'record', packed], { cwd: ROOT })
    if (temp) await rm(temp, { recursive: true, force: true })
  })

  it('packs every package (no example), with its published exports in dist/ and no tests or tsconfig', async () => {
    expect(tarballs).to.have.length(PACKAGES.length)
    expect(tarballs.filter((file) => file.includes('example'))).to.deep.equal([])
    for (const dir of PACKAGES) {
      const source = manifest(dir)
      const installed = join(project, 'node_modules', source.name)
      const published = manifest<{ types: string; import: string }>(installed)
      // the Node the README names, where npm can check it
      expect(published.engines, source.name).to.deep.equal(manifest(ROOT).engines)
      // every export the workspace has from src/ is published from dist/, with its types
      const fromSource = Object.keys(source.exports).filter((key) => source.exports[key].startsWith('./src/'))
      expect(Object.keys(published.exports), source.name).to.deep.equal(fromSource)
      for (const target of Object.values(published.exports)) {
        expect(existsSync(join(installed, target.import)), `${source.name} ${target.import}`).to.equal(true)
        expect(existsSync(join(installed, target.types)), `${source.name} ${target.types}`).to.equal(true)
        expect(existsSync(join(installed, `${target.types}.map`)), `${source.name} ${target.types}.map`).to.equal(true)
      }
      const entries = await readdir(installed)
      for (const left of ['tests', 'tsconfig.json', 'tsconfig.build.json']) expect(entries, source.name).to.not.include(left)
      expect(existsSync(join(installed, 'dist/.tsbuildinfo')), source.name).to.equal(false)
    }
  })

  it('composes core, each sandbox, guards and a third-party guard on plain node, and runs a program', async () => {
    await writeFile(join(project, 'compose.mjs'), SCRIPT)
    const ran = await ok(process.execPath, ['compose.mjs'], { cwd: project, env })
    const { runs, page } = JSON.parse(ran.stdout.trim().split('\n').at(-1) ?? '')
    expect(page).to.equal(readFileSync(join(ROOT, 'plugins/tool-cordis/web/index.html'), 'utf8'))
    expect(Object.keys(runs)).to.deep.equal(['worker-vm', 'isolated-vm', 'quickjs-wasm'])
    for (const [backend, { sandbox, result }] of Object.entries<any>(runs)) {
      // the default tier: the program ran in a child process started from dist/, on plain node (QuickJS's is in process,
      // on a worker thread started from dist/ with its WebAssembly from the installed build)
      expect(sandbox).to.equal(backend === 'quickjs-wasm' ? 'QuickJsSandbox' : 'ProcessSandbox')
      expect(result.result.greeting).to.equal('greet npm')
      expect(result.result.refused).to.have.length(2)
      expect(result.result.refused[0]).to.contain('no-secrets: the secret tool is off limits')
      expect(result.result.refused[1]).to.contain('never drop anything')
    }
  })

  it('installs on the Node the packages name, without an EBADENGINE warning, and runs `npx faber demo`', async () => {
    const ran = installed
    // every dependency's engines field admits this Node (20): amaro's, which wants 22, used to warn on every install
    expect(ran.stderr).not.to.match(/EBADENGINE/)
    expect(ran.stdout).to.contain('✗ write UNKNOWN_TOOL')
    expect(ran.stdout).to.contain('refused: edit requires reading "TODO.md" first')
    expect(ran.stdout).to.contain('✓ run_code')
    expect(ran.stdout).to.contain('{"edited":["src/greet.ts","TODO.md"],"created":"CHANGELOG.md"}')
    const version = await ok('npx', ['--no', '--', 'faber', '--version'], { cwd: project, env })
    expect(version.stdout).to.contain(manifest(join(ROOT, 'packages/cli')).version)
    // a user's own main.js importing the cli's API does not start the command
    await writeFile(join(project, 'main.js'), "import { main } from '@faber/cli'\nconsole.log(typeof main)\n")
    expect((await ok(process.execPath, ['main.js'], { cwd: project, env })).stdout).to.equal('function\n')
  })

  it("runs the published backend suites (@faber/sandbox/testing) on a user's backend with mocha, as the README shows", async () => {
    // a folder of its own inside the project: its `my-backend` is not one of the project's installed packages
    const dir = join(project, 'my-backend-tests')
    await mkdir(join(dir, 'node_modules/my-backend'), { recursive: true })
    await writeFile(join(dir, 'node_modules/my-backend/package.json'), JSON.stringify({ name: 'my-backend', type: 'module', exports: './index.js' }))
    await writeFile(join(dir, 'node_modules/my-backend/index.js'), MY_BACKEND)
    await writeFile(join(dir, 'my-backend.spec.mjs'), backendSpec())
    // the README's command, as written (its suites set their own timeouts)
    const ran = await run('npx', ['mocha', 'my-backend.spec.mjs'], { cwd: dir, env })
    const tail = `${ran.stdout.slice(-1500)}\n${ran.stderr.slice(-1500)}`
    expect(ran.code, tail).to.equal(0)
    // every hazard case, the bombs on the process tier and the leaks on both (its child started from the packed dist/)
    expect(Number(/(\d+) passing/.exec(ran.stdout)?.[1]), tail).to.be.above(60)
    expect(ran.stdout, tail).to.match(/survives a Map of objects \(process tier\)/)
    expect(ran.stdout, tail).to.match(/\(process\) keeps what a program prints or schedules off the host's streams/)
    expect(ran.stdout, tail).not.to.match(/failing|pending/)
  })

  it('names cordis a peer in every package, and npm installs one copy of it for all of them', async () => {
    for (const dir of PACKAGES) {
      const published = JSON.parse(readFileSync(join(project, 'node_modules', manifest(dir).name, 'package.json'), 'utf8'))
      expect(published.peerDependencies?.cordis, published.name).to.equal('^3.18.1')
      expect(published.dependencies?.cordis, published.name).to.equal(undefined)
    }
    // npm's peer resolution put cordis at the top, once, where every package and the user's own code import it
    const copies = await ok('npm', ['ls', 'cordis', '--all', '--parseable'], { cwd: project, env })
    expect(new Set(copies.stdout.trim().split('\n'))).to.deep.equal(new Set([join(project, 'node_modules/cordis')]))
  })

  it('refuses a project on another cordis major with one error naming the peer, and installs nothing', async () => {
    const other = join(temp, 'other-major')
    await mkdir(other)
    await writeFile(
      join(other, 'package.json'),
      JSON.stringify({ name: 'other-major', version: '1.0.0', type: 'module', dependencies: { cordis: '4.0.0-rc.10' } }),
    )
    const core = tarballs.find((file) => file.startsWith('faber-core-'))!
    const ran = await run('npm', ['install', '--dry-run', join(packed, core)], { cwd: other, env })
    expect(ran.code).to.not.equal(0)
    expect(ran.stderr).to.contain('ERESOLVE')
    expect(ran.stderr).to.contain('peer cordis@"^3.18.1" from @faber/core')
    expect(existsSync(join(other, 'node_modules'))).to.equal(false)
  })

  it('keeps grants on SQLite and on PostgreSQL through the drivers npm installed', async function () {
    const cluster = await requirePostgres(this)
    await writeFile(join(project, 'store.mjs'), STORE_SCRIPT)
    const ran = await ok(process.execPath, ['store.mjs'], { cwd: project, env: { ...env, FABER_STORE_URL: await cluster.database() } })
    expect(JSON.parse(ran.stdout.trim().split('\n').at(-1) ?? '')).to.deep.equal({
      file: { driver: 'sqlite', grants: ['ship-it'] },
      server: { driver: 'postgres', grants: ['ship-it'] },
    })
    expect(existsSync(join(project, 'node_modules', 'pg', 'package.json')), 'pg installed from npm').to.equal(true)
  })

  it('runs inside a Koishi app installed from npm, driven through its mock client (examples/koishi)', async () => {
    await ok('npm', ['install', '--no-save', ...KOISHI], { cwd: project, env })
    await writeFile(join(project, 'koishi-app.mjs'), readFileSync(join(ROOT, 'examples/koishi/app.mjs'), 'utf8'))
    await writeFile(join(project, 'koishi-drive.mjs'), KOISHI_DRIVER)
    const ran = await ok(process.execPath, ['koishi-drive.mjs'], { cwd: project, env })
    // Koishi logs to stdout too (the broken plugin's error): the driver's answer is its JSON line
    const out = JSON.parse(
      ran.stdout
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .at(-1) ?? '',
    )
    // a Koishi command ran a Faber tool
    expect(out.tool).to.equal('echo: hello')
    // a guard and approval refused theirs
    expect(out.guarded).to.match(/^DENIED: .*tables are never dropped from chat/)
    expect(out.approval).to.match(/^DENIED: the call to "pay" needs approval/)
    // the Code Mode agent's direct call collapsed; its program made two nested calls in the sandbox
    expect(out.collapsed).to.match(/^UNKNOWN_TOOL: unknown tool "echo": under code mode only run_code can be called directly/)
    expect(JSON.parse(out.program)).to.deep.equal(['echo: a', 'echo: b'])
    // Koishi's own middleware still answers, beside Faber's commands
    expect(out.middleware).to.equal('pong')
    // a Koishi plugin that fails to start stops every Faber call until it is disposed
    expect(out.failed).to.match(/^DEPLOYMENT_FAILED: no tool can run: plugin "broken-policy" is not in force/)
    expect(out.restored).to.equal('echo: hello')
    // one cordis: npm put koishi's and Faber's in one place
    const copies = await ok('npm', ['ls', 'cordis', '--all', '--parseable'], { cwd: project, env })
    expect(new Set(copies.stdout.trim().split('\n'))).to.deep.equal(new Set([join(project, 'node_modules/cordis')]))
  })

  it('type-checks a TypeScript consumer of the public types', async () => {
    await writeFile(join(project, 'consumer.ts'), CONSUMER)
    // every published entry point, so each package's declarations are checked with what it depends on (none skipped)
    const entries = PACKAGES.flatMap((dir) => {
      const { name, exports } = manifest(dir)
      const published = Object.keys(exports).filter((key) => exports[key].startsWith('./src/'))
      return published.map((key) => `${name}${key.slice(1)}`)
    })
    await writeFile(join(project, 'entries.ts'), entries.map((entry, i) => `export * as entry${i} from '${entry}'\n`).join(''))
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, types: ['node'] },
        files: ['consumer.ts', 'entries.ts'],
      }),
    )
    await ok(process.execPath, [join(project, 'node_modules/typescript/bin/tsc'), '-p', '.'], { cwd: project, env })
  })
})
