import { expect } from 'chai'
import { Logger } from 'cordis'
import { quickstart } from '../main.ts'

Logger.levels.base = 0

describe('example: quickstart', () => {
  it('answers the same through native calls and through one run_code program', async () => {
    const [native, code] = await quickstart()
    expect(native.shown).to.deep.equal(['edit', 'glob', 'grep', 'list', 'read', 'write'])
    expect(code.shown).to.deep.equal(['run_code'])
    expect(native.answer).to.equal('9 lines.')
    expect(code.answer).to.equal(native.answer)
    expect(native.toolCalls).to.equal(3)
    expect(code.toolCalls).to.equal(1)
    // the native side carries the file contents back into the context; the program returns only the count
    expect(code.resultBytes).to.be.lessThan(native.resultBytes)
    expect(native.promptBytes).to.equal(0)
    expect(code.promptBytes).to.be.greaterThan(0)
  })
})
