// expected failures are one clear message and a documented exit code; stack traces only with --debug

import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { GrantStore } from '@faber/plugin-approval'
import { openStore } from '@faber/store'
import { expect } from 'chai'
import { faber } from './helpers.ts'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

const DEPLOYMENT = `mode: code
plugins:
  '@faber/sandbox': {}
  '@faber/plugin-tools-fs': { root: '\${dir}' }
agents:
  - name: main
model:
  provider: scripted
  script:
    - text: hello from the default file
`

const noStack = (text: string) => expect(text, text).not.to.match(/^\s+at /m)

describe('faber: messages, not stacks', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-messages-'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('--version prints the version of @faber/cli', async () => {
    const { version } = JSON.parse(await readFile(join(ROOT, 'packages/cli/package.json'), 'utf8'))
    const ran = await faber(['--version'])
    expect(ran.code).to.equal(0)
    expect(ran.stdout).to.equal(`faber ${version}\n`)
  })

  it('run, chat, inspect and mcp without a file use ./faber.yml, then ./faber.yaml, and say so when there is neither', async () => {
    const none = await faber(['inspect'], { cwd: dir })
    expect(none.code).to.equal(2)
    expect(none.stderr).to.include('no deployment file given, and there is no faber.yml or faber.yaml in')
    noStack(none.stderr)

    await writeFile(join(dir, 'faber.yaml'), DEPLOYMENT)
    const yaml = await faber(['inspect', '--json'], { cwd: dir })
    expect(yaml.code, yaml.stderr).to.equal(0)
    expect(JSON.parse(yaml.stdout).tools.map((l: { agent: string | null }) => l.agent)).to.include('main')

    await writeFile(join(dir, 'faber.yml'), DEPLOYMENT.replace('hello from the default file', 'hello from faber.yml'))
    const ran = await faber(['run', '--json'], { cwd: dir, input: 'hi\n' })
    expect(ran.code, ran.stderr).to.equal(0)
    expect(ran.stdout).to.include('hello from faber.yml')
    const chatted = await faber(['chat', '--json'], { cwd: dir, input: 'hi\n', env: { FABER_MODEL: undefined } })
    expect(chatted.code, chatted.stderr).to.equal(0)
    expect(chatted.stdout).to.include('hello from faber.yml')

    const mcp = await faber(['mcp', '--agent', 'nobody'], { cwd: dir })
    expect(mcp.code).to.equal(2)
    expect(mcp.stderr).to.equal('faber mcp: --agent: faber.yml has no agent named "nobody"; its agents: main\n')
  })

  it('a bad flag, a bad file, an unknown key and a failing plugin: one message each, exit 2', async () => {
    const flag = await faber(['run', '--frobnicate'], { cwd: dir })
    expect(flag.code).to.equal(2)
    expect(flag.stderr).to.equal('faber run: unknown option --frobnicate\nRun faber run --help for its options.\n')
    noStack(flag.stderr)

    const missing = await faber(['inspect', 'missing.yml'], { cwd: dir })
    expect(missing.code).to.equal(2)
    expect(missing.stderr).to.equal('missing.yml: cannot read the deployment file (ENOENT)\n')

    await writeFile(join(dir, 'keys.yml'), 'mode: code\nbogus: 1\n')
    const key = await faber(['inspect', 'keys.yml'], { cwd: dir })
    expect(key.code).to.equal(2)
    expect(key.stderr).to.match(/^keys\.yml:2: bogus: unknown key/)

    await writeFile(
      join(dir, 'broken.mjs'),
      "export const name = 'broken'\nexport function apply() { throw new TypeError('the broken plugin cannot start') }\n",
    )
    await writeFile(join(dir, 'plugin.yml'), "plugins:\n  './broken.mjs': {}\n")
    const plugin = await faber(['inspect', 'plugin.yml'], { cwd: dir })
    expect(plugin.code).to.equal(2)
    expect(plugin.stderr).to.include('the broken plugin cannot start')
    noStack(plugin.stderr)
  })

  it('a store this Faber cannot use: its message, exit 2, not an unexpected failure', async () => {
    const path = join(dir, 'newer.db')
    const store = await openStore({ path })
    await new GrantStore(store).ready()
    await store.run("UPDATE faber_schema SET version = 99 WHERE owner = 'approval'")
    await store.close()
    const ran = await faber(['grants', 'pending', '--store', path], { cwd: dir })
    expect(ran.code).to.equal(2)
    expect(ran.stderr).to.match(
      /^the store .*newer\.db cannot be used: its approval tables are at version 99, newer than this Faber knows \(\d+\); upgrade Faber\n$/,
    )
  })

  it("a file with several problems: every one of them, one line each in the file's order, plugin configs included", async () => {
    await writeFile(
      join(dir, 'several.yml'),
      [
        'mode: fast',
        'plugins:',
        "  '@faber/plugin-guards': { breaker: { blockAfter: -1 } }",
        "  '@faber/plugin-nope': {}",
        'agents:',
        '  - { name: main, sdk: tiny }',
        '  - { name: helper, parent: nobody }',
        'bogus: 1',
        'session: { maxSteps: -2 }',
        '',
      ].join('\n'),
    )
    const ran = await faber(['inspect', 'several.yml'], { cwd: dir })
    expect(ran.code).to.equal(2)
    expect(ran.stderr.split('\n')).to.deep.equal([
      'several.yml:1: mode: expected one of native, code, both but got string "fast"',
      'several.yml:3: plugins["@faber/plugin-guards"].breaker.blockAfter: expected number >= 0 but got -1',
      'several.yml:4: plugins["@faber/plugin-nope"]: cannot load plugin "@faber/plugin-nope": no such package or file is installed',
      'several.yml:6: agents[0].sdk: expected one of full, index, auto but got string "tiny"',
      'several.yml:7: agents[1].parent: expected the name of an agent defined above, but "nobody" is not one',
      'several.yml:8: bogus: unknown key; expected one of mode, core, plugins, agents, model, session',
      'several.yml:9: session.maxSteps: expected a non-negative number but got number -2',
      '',
    ])
  })

  it('--debug adds the stack trace', async () => {
    const ran = await faber(['inspect', 'missing.yml', '--debug'], { cwd: dir })
    expect(ran.code).to.equal(2)
    expect(ran.stderr)
      .to.include('cannot read the deployment file')
      .and.match(/^\s+at /m)
  })

  it('pnpm exec faber, as the READMEs write it, ends with the message and nothing of pnpm', async () => {
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve) =>
      execFile('pnpm', ['exec', 'faber', 'inspect', join(dir, 'missing.yml')], { cwd: ROOT }, (error, _stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stderr }),
      ),
    )
    expect(code).to.equal(2)
    expect(stderr).to.equal(`${join(dir, 'missing.yml')}: cannot read the deployment file (ENOENT)\n`)
  })
})
