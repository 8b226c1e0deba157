import { expect } from 'chai'
import fc from 'fast-check'
import { preview } from '../src/trace.ts'

describe('argument previews', () => {
  it('is the JSON text when it fits, and its first characters when it does not', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 2, max: 200 }), (value, max) => {
        const json = JSON.stringify(value)
        const shown = preview(value as never, max)
        if (json.length <= max) expect(shown).to.equal(json)
        else expect(shown).to.equal(`${json.slice(0, max - 1)}…`)
      }),
    )
  })

  it('reads no further into a value than it shows', () => {
    const large: Record<string, unknown> = { path: 'a.txt', content: 'x'.repeat(1_000_000) }
    Object.defineProperty(large, 'later', {
      enumerable: true,
      get() {
        throw new Error('read past the preview')
      },
    })
    expect(preview(large as never, 40)).to.equal(`${JSON.stringify({ path: 'a.txt', content: 'x'.repeat(100) }).slice(0, 39)}…`)
  })
})
