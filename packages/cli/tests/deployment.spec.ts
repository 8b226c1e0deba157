// biome-ignore-all lint/suspicious/noTemplateCurlyInString: deployment files use ${dir} and ${env.NAME} substitutions
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { SDK_SECTION } from '@faber/core'
import { expect } from 'chai'
import { Logger } from 'cordis'
import { compose, DeploymentError, loadDeploymentFile, parseDeployment } from '../src/index.ts'

Logger.levels.base = 0

async function deployed(yaml: string, dir: string) {
  const file = join(dir, 'deploy.yml')
  await writeFile(file, yaml)
  return compose(await loadDeploymentFile(file))
}

async function failure(yaml: string, dir = '/tmp') {
  try {
    const spec = parseDeployment(yaml, 'deploy.yml', dir)
    const { stop } = await compose(spec)
    await stop()
  } catch (error) {
    expect(error).to.be.instanceOf(DeploymentError)
    return (error as Error).message
  }
  throw new Error('expected a DeploymentError')
}

describe('deployment files', () => {
  let dir: string
  beforeEach(async () => {
    dir = join(process.env.TMPDIR ?? '/tmp', `faber-cli-${process.pid}-${Math.random().toString(36).slice(2)}`)
    await mkdir(dir, { recursive: true })
  })

  it('names the file, the line, the key path and what a plugin Config expected', async () => {
    const message = await failure(['mode: code', 'plugins:', "  '@faber/plugin-guards':", '    breaker:', '      blockAfter: -1', ''].join('\n'))
    expect(message).to.equal('deploy.yml:5: plugins["@faber/plugin-guards"].breaker.blockAfter: expected number >= 0 but got -1')
  })

  it('names a missing required key of a plugin', async () => {
    const message = await failure(['plugins:', "  '@faber/plugin-tools-fs': {}", ''].join('\n'))
    expect(message).to.match(/^deploy\.yml:2: plugins\["@faber\/plugin-tools-fs"\]\.root: .*/)
  })

  it('refuses unknown keys, bad modes, unknown parents and unknown packages', async () => {
    expect(await failure('mdoe: code\n')).to.equal('deploy.yml:1: mdoe: unknown key; did you mean `mode`?')
    expect(await failure('zzzzzzz: 1\n')).to.equal('deploy.yml:1: zzzzzzz: unknown key; expected one of mode, core, plugins, agents, model, session')
    expect(await failure('mode: fast\n')).to.equal('deploy.yml:1: mode: expected one of native, code, both but got string "fast"')
    expect(await failure('agents:\n  - name: child\n    parent: lead\n')).to.match(
      /^deploy\.yml:3: agents\[0\]\.parent: expected the name of an agent defined above/,
    )
    expect(await failure("plugins:\n  '@faber/plugin-nope': {}\n")).to.match(
      /^deploy\.yml:2: plugins\["@faber\/plugin-nope"\]: cannot load plugin "@faber\/plugin-nope"/,
    )
    expect(await failure('core:\n  maxParallelSubCalls: 0\n')).to.match(/^deploy\.yml:2: core\.maxParallelSubCalls: expected number >= 1/)
    expect(await failure('mode: [code\n')).to.match(/^deploy\.yml:\d+: not valid YAML/)
    expect(await failure('agents:\n  - name: a\n    sdk: tiny\n')).to.equal(
      'deploy.yml:3: agents[0].sdk: expected one of full, index, auto but got string "tiny"',
    )
  })

  it('says how to load a plugin file written as an ES module in .ts outside a "type": "module" package', async () => {
    // the plugin path of the CLI README's deployment file, once written as my-plugin.ts in a directory of its own
    const plugin = "export const name = 'my-plugin'\nexport function apply() {}\n"
    await writeFile(join(dir, 'my-plugin.ts'), plugin)
    await writeFile(join(dir, 'my-plugin.mts'), plugin)
    expect(await failure("plugins:\n  './my-plugin.ts': {}\n", dir)).to.match(
      /^deploy\.yml:2: plugins\["\.\/my-plugin\.ts"\]: cannot load plugin "\.\/my-plugin\.ts": it is an ES module in a CommonJS scope: name it \.mjs or \.mts, or put a package\.json with "type": "module" beside it/,
    )
    const { stop } = await compose(parseDeployment("plugins:\n  './my-plugin.mts': {}\n", 'deploy.yml', dir))
    await stop()
  })

  it('names a plugin that threw a value that cannot be turned into text, loading or checking its config', async () => {
    // a value with no prototype: String() of it throws in turn
    await writeFile(join(dir, 'throws-loading.mjs'), 'throw Object.create(null)\n')
    await writeFile(join(dir, 'throws-checking.mjs'), 'export function Config() {\n  throw Object.create(null)\n}\nexport function apply() {}\n')
    expect(await failure("plugins:\n  './throws-loading.mjs': {}\n", dir)).to.equal(
      'deploy.yml:2: plugins["./throws-loading.mjs"]: cannot load plugin "./throws-loading.mjs": an error that could not be shown',
    )
    expect(await failure("plugins:\n  './throws-checking.mjs': {}\n", dir)).to.equal(
      'deploy.yml:2: plugins["./throws-checking.mjs"]: an error that could not be shown',
    )
  })

  it('substitutes ${dir} and ${env.NAME}, and says which variable is missing', async () => {
    process.env.FABER_TEST_MODE = 'both'
    const spec = parseDeployment(
      "mode: code\nplugins:\n  '@faber/plugin-tools-fs': { root: '${dir}/ws' }\nsession: { persona: '${env.FABER_TEST_MODE}' }\n",
      'd.yml',
      '/srv/x',
    )
    expect(spec.plugins[0].config).to.deep.equal({ root: '/srv/x/ws' })
    expect(spec.session.persona).to.equal('both')
    expect(await failure("session: { persona: '${env.FABER_TEST_UNSET_VAR}' }\n")).to.equal(
      'deploy.yml:1: session.persona: the environment variable FABER_TEST_UNSET_VAR is not set',
    )
  })

  it('composes agents with parents, modes, masks and agent-scoped plugins', async () => {
    await mkdir(join(dir, 'ws'))
    const { ctx, agents, agent, stop } = await deployed(
      [
        'mode: code',
        'plugins:',
        "  '@faber/sandbox': {}",
        'agents:',
        '  - name: lead',
        '    sdk: index',
        '    plugins:',
        "      '@faber/plugin-tools-fs': { root: '${dir}/ws' }",
        '  - name: reviewer',
        '    parent: lead',
        '    mode: native',
        '    restrict: { deny: [write, edit] }',
        'session: { agent: reviewer }',
        '',
      ].join('\n'),
      dir,
    )
    try {
      const lead = agents.get('lead')!
      const reviewer = agents.get('reviewer')!
      expect(agent).to.equal(reviewer)
      expect(reviewer.parent).to.equal(lead)
      expect(ctx.tools.wire(lead).tools.map((t) => t.name)).to.deep.equal(['run_code'])
      expect(ctx.tools.wire(lead).sections.find((s) => s.id === SDK_SECTION)?.text).to.include('an index')
      expect(ctx.tools.wire(reviewer).tools.map((t) => t.name)).to.deep.equal(['glob', 'grep', 'list', 'read'])
      // the tools were registered on lead, so the global layer does not see them
      expect(ctx.tools.schemas().map((t) => t.name)).to.deep.equal(['run_code'])
    } finally {
      await stop()
    }
  })

  it('loads two instances of a plugin under name:suffix keys', async () => {
    await mkdir(join(dir, 'a'))
    const message = await failure(["plugins:\n  '@faber/plugin-tools-fs': { root: '/tmp' }\n  '@faber/plugin-tools-fs:second': { root: '/tmp' }\n"].join(''))
    // the second instance registers the same tool names on the same layer: the core refuses, and the error names the plugin
    expect(message).to.match(/plugin "tools-fs" failed to start: tool "read" is already registered/)
  })
})
