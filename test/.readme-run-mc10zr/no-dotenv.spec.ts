import { call, deployment, disposeAll, echoTool } from '@faber/core/testing'
import { expect } from 'chai'
import NoDotenv from './my-plugin.ts'

afterEach(disposeAll)

it('denies a call that mentions .env', async () => {
  const ctx = await deployment({ mode: 'native' }, (ctx) => ctx.plugin(NoDotenv, {}))
  ctx.tools.register(echoTool())
  const result = await call(ctx, 'echo', { text: 'cat .env' })
  expect(result.isError && result.error.code).to.equal('DENIED')
})
