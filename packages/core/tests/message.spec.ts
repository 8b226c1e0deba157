import { messageOf } from '@faber/core'
import { expect } from 'chai'

describe('messageOf: what a thrown value says', () => {
  it("reads an Error's message, and anything else as text", () => {
    expect(messageOf(new TypeError('bad input'))).to.equal('bad input')
    expect(messageOf('plain')).to.equal('plain')
    expect(messageOf(42)).to.equal('42')
    expect(messageOf(undefined)).to.equal('undefined')
    expect(messageOf(Object.assign(new Error(), { message: Symbol('odd') }))).to.equal('Symbol(odd)')
  })

  it('never throws, whatever was thrown', () => {
    const revoked = Proxy.revocable({}, {})
    revoked.revoke()
    const getter = new Error()
    Object.defineProperty(getter, 'message', {
      get() {
        throw new Error('no')
      },
    })
    const trap = new Proxy(
      {},
      {
        getPrototypeOf() {
          throw new Error('no')
        },
      },
    )
    const toStringThrows = {
      toString() {
        throw new Error('no')
      },
    }
    for (const hostile of [Object.create(null), revoked.proxy, getter, trap, toStringThrows, Symbol.prototype])
      expect(messageOf(hostile)).to.equal('an error that could not be shown')
  })

  it('cuts a long message where asked, and marks the cut', () => {
    expect(messageOf(new Error('x'.repeat(300)), 200)).to.equal(`${'x'.repeat(200)}…`)
    expect(messageOf(new Error('short'), 200)).to.equal('short')
  })
})
