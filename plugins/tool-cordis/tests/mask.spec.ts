import { expect } from 'chai'
import { MASK, maskConfig } from '../src/index.ts'

describe('plugin configs on the web view', () => {
  it('masks the values of keys that name secrets, whatever their shape', () => {
    const config = {
      root: '/srv/work',
      apiKey: 'sk-1',
      apiKeyEnv: 'OPENAI_API_KEY',
      servers: [{ name: 'docs', headers: { Authorization: 'Bearer abc', 'x-trace': 'on' }, oauth: { clientSecret: 's', scopes: ['read'] } }],
      password: 12345,
      token: '',
      note: 'Basic dXNlcjpwYXNz',
      database: 'postgres://app:hunter2@db:5432/app',
    }
    expect(maskConfig(config)).to.deep.equal({
      root: '/srv/work',
      apiKey: MASK,
      apiKeyEnv: 'OPENAI_API_KEY',
      // under a key that names a secret, everything is masked
      servers: [{ name: 'docs', headers: { Authorization: MASK, 'x-trace': 'on' }, oauth: { clientSecret: MASK, scopes: [MASK] } }],
      password: MASK,
      token: '',
      note: MASK,
      database: `postgres://${MASK}@db:5432/app`,
    })
  })

  it('names what is not JSON and bounds what is large', () => {
    const cyclic: Record<string, unknown> = { big: 'x'.repeat(1000), list: Array.from({ length: 150 }, (_, i) => i) }
    cyclic.self = cyclic
    const masked = maskConfig({ match: function match() {}, stream: new Map(), cyclic }) as Record<string, any>
    expect(masked.match).to.equal('[function match]')
    expect(masked.stream).to.equal('[Map]')
    expect(masked.cyclic.self).to.equal('[circular]')
    expect(masked.cyclic.big).to.match(/^x{400}… \(600 more characters\)$/)
    expect(masked.cyclic.list).to.have.length(101)
  })
})
