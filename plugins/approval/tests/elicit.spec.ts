import { PassThrough } from 'node:stream'
import { deployment, disposeAll } from '@faber/core/testing'
import { expect } from 'chai'
import Approval, { type ElicitationSchema, TerminalAnswerer } from '../src/index.ts'

type Service = InstanceType<typeof Approval>

const SCHEMA: ElicitationSchema = {
  type: 'object',
  properties: {
    name: { type: 'string', default: 'John Doe' },
    age: { type: 'integer', minimum: 0 },
    status: { type: 'string', enum: ['active', 'inactive'], default: 'active' },
    verified: { type: 'boolean', default: true },
  },
  required: ['age'],
}

/** a terminal stand-in: input and output streams that say they are TTYs; answers are written as lines */
function fakeTerminal() {
  const input = Object.assign(new PassThrough(), { isTTY: true })
  const output = Object.assign(new PassThrough(), { isTTY: true })
  let shown = ''
  const waiting: [string, () => void][] = []
  output.on('data', (chunk: Buffer) => {
    shown += chunk.toString()
    for (const entry of [...waiting]) if (shown.includes(entry[0])) waiting.splice(waiting.indexOf(entry), 1) && entry[1]()
  })
  const shows = (text: string) => new Promise<void>((resolve) => (shown.includes(text) ? resolve() : waiting.push([text, resolve])))
  return { input, output, shows, shown: () => shown, clear: () => void (shown = '') }
}

describe('approval: forms through the terminal answerer', () => {
  afterEach(disposeAll)

  async function start() {
    const terminal = fakeTerminal()
    const ctx = await deployment({}, (ctx) => {
      ctx.plugin(Approval, { require: [] })
      ctx.plugin(TerminalAnswerer, { input: terminal.input, output: terminal.output })
    })
    const ask = () =>
      (ctx.approval as Service).elicit({ source: 'MCP server "crm"', message: 'Who are you?', schema: SCHEMA, signal: new AbortController().signal })
    return { terminal, ask }
  }

  it('fills in a form field by field; Enter keeps a default, a bad value is asked again', async () => {
    const { terminal, ask } = await start()
    const answer = ask()
    await terminal.shows('[y] answer  [n] decline  [c] cancel: ')
    expect(terminal.shown()).to.include('── MCP server "crm" asks ──\nWho are you?')
    terminal.input.write('y\n')
    await terminal.shows('name (string) [John Doe]: ')
    terminal.input.write('\n')
    await terminal.shows('age (integer): ')
    terminal.input.write('-3\n')
    await terminal.shows('expected at least 0')
    terminal.input.write('41\n')
    await terminal.shows('status (active | inactive) [active]: ')
    terminal.input.write('inactive\n')
    await terminal.shows('verified (y/n) [true]: ')
    terminal.input.write('\n')
    expect(await answer).to.deep.equal({ action: 'accept', content: { name: 'John Doe', age: 41, status: 'inactive', verified: true } })
  })

  it('declines and cancels as typed', async () => {
    const { terminal, ask } = await start()
    const declined = ask()
    await terminal.shows('[c] cancel: ')
    terminal.input.write('n\n')
    expect(await declined).to.deep.equal({ action: 'decline' })
    terminal.clear()
    const cancelled = ask()
    await terminal.shows('[c] cancel: ')
    terminal.input.write('maybe\n')
    await terminal.shows('please answer y, n or c: ')
    terminal.input.write('c\n')
    expect(await cancelled).to.deep.equal({ action: 'cancel' })
  })
})

describe('approval: forms, failing closed', () => {
  afterEach(disposeAll)

  it('a form answerer that throws a value with no message to read: cancelled, and audited as such', async () => {
    const ctx = await deployment({}, (ctx) => {
      ctx.plugin(Approval, { require: [] })
      ctx.plugin({
        name: 'broken',
        apply: (c: typeof ctx) =>
          c.on('approval/elicit', () => {
            throw Object.create(null)
          }),
      })
    })
    const audited: { action: string; answeredBy: string; note?: string }[] = []
    ctx.on('approval/elicited', (event) => void audited.push(event))
    const result = await (ctx.approval as Service).elicit({ source: 'a test', message: 'Who are you?', schema: SCHEMA, signal: new AbortController().signal })
    expect(result).to.deep.equal({ action: 'cancel' })
    expect(audited.map(({ action, answeredBy, note }) => ({ action, answeredBy, note }))).to.deep.equal([
      { action: 'cancel', answeredBy: 'broken', note: 'the answerer threw: an error that could not be shown' },
    ])
  })
})
