// the example deployment file in examples/deployment composes and reports as its comments say

import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { faber } from '../packages/cli/tests/helpers.ts'
import { requireBubblewrap } from '../plugins/tools-shell/tests/helpers.ts'

const FILE = fileURLToPath(new URL('../examples/deployment/faber.yml', import.meta.url))

describe('examples/deployment', () => {
  before(function () {
    // its shell is confined by bubblewrap and refuses to start without it
    requireBubblewrap(this)
  })

  it('composes every plugin and shows each agent the view its file declares', async () => {
    const ran = await faber(['inspect', FILE, '--json'])
    expect(ran.code, ran.stderr).to.equal(0)
    const report = JSON.parse(ran.stdout)
    type Node = { name: string; state: string; children: Node[] }
    const flat = (node: Node): Node[] => [node, ...node.children.flatMap(flat)]
    const plugins = flat(report.plugins)
    expect(plugins.filter((p) => p.state !== 'active')).to.deep.equal([])
    expect(plugins.map((p) => p.name)).to.include.members([
      'tools',
      'codeRuntime',
      'tools-fs',
      'tools-shell',
      'fs-observation',
      'guards',
      'approval',
      'inspector',
    ])
    const view = (agent: string | null) => report.tools.find((l: { agent: string | null }) => l.agent === agent)
    expect(view('lead')).to.deep.include({ mode: 'code', wire: ['run_code'] })
    expect(view('lead').collapsed).to.include.members(['read', 'write', 'edit'])
    expect(view('reviewer')).to.deep.include({ mode: 'native', wire: ['cordis_inspect', 'glob', 'grep', 'list', 'read'] })
    expect(view('lead').collapsed).to.include.members(['bash', 'bash_output', 'bash_stop'])
    const bash = view(null).visible.find((tool: { name: string }) => tool.name === 'bash')
    expect(bash.status).to.match(/^confined by bubblewrap: .*examples\/deployment\/workspace writable/)
  })

  it('faber inspect says whether the shell is confined', async () => {
    const ran = await faber(['inspect', FILE])
    expect(ran.code, ran.stderr).to.equal(0)
    expect(ran.stdout).to.match(/^ {2}bash: confined by bubblewrap: /m)
  })
})
