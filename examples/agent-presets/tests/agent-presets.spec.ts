import { expect } from 'chai'
import { Logger } from 'cordis'
import { agentPresets } from '../main.ts'

Logger.levels.base = 0

describe('example: agent-presets', () => {
  it('children inherit the preset mode, mask and guard; a child may override only the mode', async () => {
    const [alice, bob] = await agentPresets()
    expect(alice).to.deep.include({ chain: ['alice', 'reviewer'], mode: 'code', modeFrom: 'reviewer', shown: ['run_code'] })
    expect(alice.visible).to.deep.equal(['glob', 'grep', 'list', 'read', 'run_code'])
    expect(JSON.parse(alice.outcomes[0].slice('run_code: '.length))).to.deep.equal({
      lines: 3,
      canWrite: false,
      secret: 'reviewers do not read secrets/; ask the owner instead',
    })

    expect(bob).to.deep.include({ mode: 'both', modeFrom: 'bob' })
    expect(bob.shown).to.deep.equal(['glob', 'grep', 'list', 'read', 'run_code'])
    expect(bob.outcomes[0]).to.match(/^read: README\.md \(version sha256:/)
    expect(bob.outcomes[1]).to.match(/^write: Error: unknown tool "write": no tool of that name is available here/)
    expect(bob.outcomes[2]).to.equal('read: Error: reviewers do not read secrets/; ask the owner instead')
  })
})
