// faber replay given a plugin whose replay role is malformed (a typo, a stand-in that is no plugin, a config mapping
// that throws, a getter that throws) or whose stand-in fails to start: refused before anything starts, by the
// plugin's key and what is wrong, never a bare error from deep inside

import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { readDeployment, replay } from '@faber/cli'
import { expect } from 'chai'
import { Logger } from 'cordis'

const started: string[] = []
const standIn = (name: string) => ({ name, apply: () => void started.push(name) })

const roles: [string, () => unknown, RegExp][] = [
  ['a role misspelt', () => 'Inert', /it says replay: "Inert", which is none of 'inert', 'omit' or \{ plugin, config\? \}/],
  ['a stand-in that is not a plugin', () => ({ plugin: 42 }), /its replay stand-in \(replay\.plugin\) is not a plugin/],
  ['a stand-in left undefined', () => ({ plugin: undefined }), /its replay stand-in \(replay\.plugin\) is not a plugin/],
  [
    'a config mapping that throws',
    () => ({
      plugin: standIn('mapped'),
      config: () => {
        throw new Error('no such key')
      },
    }),
    /its replay\.config threw: no such key/,
  ],
  [
    'a replay getter that throws',
    () => {
      throw new Error('not today')
    },
    /cannot be replayed: not today/,
  ],
]

describe('faber replay: plugins with a malformed replay role', function () {
  this.timeout(30_000)
  let dir: string
  let log: string
  beforeEach(async () => {
    started.length = 0
    dir = await mkdtemp(join(tmpdir(), 'faber-hostile-replay-'))
    log = join(dir, 'session.jsonl')
    await writeFile(log, `${JSON.stringify({ type: 'session', version: 3, id: 's', agent: 'main', model: 'm' })}\n`)
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  const deploymentWith = (plugin: object) => {
    const spec = readDeployment({ agents: [{ name: 'main' }], plugins: { '@faber/plugin-tools-fs': { root: dir } } }, 'mine.yml', dir)
    spec.plugins.push({ key: './odd.js', use: './odd.js', config: {}, plugin })
    return spec
  }

  for (const [title, role, problem] of roles) {
    it(`${title}: refused by name, nothing started`, async () => {
      const plugin = { name: 'odd', apply: () => void started.push('odd') }
      Object.defineProperty(plugin, 'replay', { get: role })
      const error = await replay([log], deploymentWith(plugin)).catch((caught) => caught)
      expect(error?.name).to.equal('DeploymentError')
      expect(error.message).to.match(/^mine\.yml: plugins\["\.\/odd\.js"\]: "\.\/odd\.js" cannot be replayed: /)
      expect(error.message).to.match(problem)
      expect(started).to.deep.equal([])
    })
  }

  it('a stand-in that throws as it starts: the replay fails naming it, and reports nothing', async () => {
    const level = Logger.levels.base
    Logger.levels.base = 0
    try {
      const failing = {
        name: 'failing-stand-in',
        apply: () => {
          throw new Error('cannot start')
        },
      }
      const error = await replay([log], deploymentWith({ name: 'odd', apply: () => {}, replay: { plugin: failing } })).catch((caught) => caught)
      expect(error?.name).to.equal('DeploymentError')
      expect(error.message).to.equal('mine.yml: plugins["./odd.js"]: plugin "failing-stand-in" failed to start: cannot start')
    } finally {
      Logger.levels.base = level
    }
  })
})
