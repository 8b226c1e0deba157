// `faber run` and `faber chat` as people run them: the deployment file the READMEs show, a real model server on
// 127.0.0.1 streaming OpenAI chat completions, and (for the terminal) a real pseudo-terminal.

import { readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { expect } from 'chai'
import { type ModelServer, modelServer, type Step } from '../../agent/tests/model-servers.ts'
import { exampleCopy, faber, faberPty, jsonLines, summaryProgram } from './helpers.ts'

const PROGRAM = summaryProgram('a workspace for the example\n')

const runCode = { toolCalls: [{ name: 'run_code', arguments: { code: PROGRAM, description: 'read the notes, write a summary' } }] }

describe('faber against a local model server', function () {
  this.timeout(60_000)
  let dir: string
  let server: ModelServer | undefined

  beforeEach(async () => {
    dir = await exampleCopy('faber-served-')
  })
  afterEach(async () => {
    await server?.close()
    server = undefined
    await rm(dir, { recursive: true, force: true })
  })

  /** `faber chat` on a terminal against a server scripted with `steps`, typed up to the approval of the run_code turn */
  async function chatAtApproval(steps: Step[]) {
    server = await modelServer('openai', steps)
    const pty = faberPty(['chat', '--base-url', server.url, '--model', 'local-model', '--root', join(dir, 'workspace')], {
      cwd: dir,
      env: { FABER_API_KEY: 'sk-local' },
    })
    try {
      await pty.until('you › ')
      pty.type('summarise the notes\r')
      await pty.until('[n] reject: ')
      return pty
    } catch (error) {
      pty.kill()
      throw error
    }
  }

  it('faber run with the example file: streamed, run_code with nested calls, approval unanswered when piped, a final answer', async () => {
    server = await modelServer('openai', [runCode, { text: 'The notes describe the example workspace.' }])
    const ran = await faber(['run', 'faber.yml', '--base-url', server.url, '--json'], {
      cwd: dir,
      input: 'summarise the notes\n',
      env: { FABER_API_KEY: 'sk-local' },
    })
    expect(ran.code, ran.stderr).to.equal(0)
    const events = jsonLines(ran.stdout)
    const nested = events.filter((e) => e.type === 'nested-end').map((e) => [e.name, e.result.isError])
    expect(nested).to.deep.equal([
      ['read', false],
      ['write', true],
    ])
    const call = events.find((e) => e.type === 'call-end')
    expect(call?.result.content).to.include('"lines"').and.include('approval')
    expect(events.find((e) => e.type === 'turn-end')?.outcome).to.include({ reason: 'done', text: 'The notes describe the example workspace.' })
    // the file's model block leaves out timeoutMs, maxRetries and stream: the defaults hold (a stream, one request per step)
    expect(server.requests).to.have.length(2)
    const [first] = server.requests
    expect(first.path).to.equal('/v1/chat/completions')
    expect(first.headers.authorization).to.equal('Bearer sk-local')
    expect(first.body).to.deep.include({ model: 'gpt-4o-mini', stream: true })
    expect(first.body.tools.map((t: { function: { name: string } }) => t.function.name)).to.deep.equal(['run_code'])
    expect(server.requests[1].body.messages.at(-1)).to.include({ role: 'tool' })
  })

  it('faber run shows a retry, and a stream that breaks after content as partial text with the error on its own line', async () => {
    server = await modelServer('openai', [
      {
        raw: (res) => {
          res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' })
          res.end(JSON.stringify({ error: { message: 'rate limited' } }))
        },
      },
      {
        raw: (res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'The notes sa' } }] })}\n\n`)
          res.end('data: {"choices": [ cut\n\n')
        },
      },
    ])
    const ran = await faber(['run', 'faber.yml', '--base-url', server.url], { cwd: dir, input: 'summarise the notes\n', env: { FABER_API_KEY: 'sk-local' } })
    expect(ran.code).to.equal(1)
    expect(ran.stdout).to.include('429 from the model; retrying in 1 s (attempt 2 of 4)')
    expect(ran.stdout).to.match(/model › The notes sa\n {2}\(the answer above is partial: the model stopped sending\)\n/)
    expect(ran.stderr).to.match(/^faber run: turn 1 failed: openai:gpt-4o-mini: a stream chunk is not JSON/)
  })

  it('piped faber run runs every line as a turn after a failed one, says why on stderr only, and exits 1', async () => {
    // the first turn's request fails for good (500, and 500 on each of its three retries); the next two turns answer
    const failing: Step = {
      raw: (res) => {
        res.writeHead(500, { 'content-type': 'application/json', 'retry-after': '0' })
        res.end(JSON.stringify({ error: { message: 'the upstream is down' } }))
      },
    }
    const steps = [failing, failing, failing, failing, { text: 'answer to b' }, { text: 'answer to c' }]
    server = await modelServer('openai', steps)
    const ran = await faber(['run', 'faber.yml', '--base-url', server.url], { cwd: dir, input: 'a\nb\nc\n', env: { FABER_API_KEY: 'sk-local' } })
    expect(ran.code).to.equal(1)
    expect(ran.stdout).to.include('you › b').and.include('model › answer to b').and.include('you › c').and.include('model › answer to c')
    expect(ran.stdout).to.include('turn 3 done')
    expect(ran.stderr).to.equal(
      `faber run: turn 1 failed: openai:gpt-4o-mini: the server answered 500 at ${server.url}/chat/completions: the upstream is down\n`,
    )
    expect(ran.stdout).not.to.match(/error|upstream is down/)
    expect(server.requests.map((r) => r.body.messages.at(-1).content)).to.deep.equal(['a', 'a', 'a', 'a', 'b', 'c'])
    await server.close()

    // --json: the failed turn is a record on stdout too, for machines; the message still goes to stderr
    server = await modelServer('openai', steps)
    const json = await faber(['run', 'faber.yml', '--base-url', server.url, '--json'], { cwd: dir, input: 'a\nb\nc\n', env: { FABER_API_KEY: 'sk-local' } })
    expect(json.code).to.equal(1)
    const events = jsonLines(json.stdout)
    expect(events.filter((e) => e.type === 'error').map((e) => e.message)).to.deep.equal([
      `openai:gpt-4o-mini: the server answered 500 at ${server.url}/chat/completions: the upstream is down`,
    ])
    expect(events.filter((e) => e.type === 'turn-end').map((e) => [e.outcome.turn, e.outcome.text])).to.deep.equal([
      [2, 'answer to b'],
      [3, 'answer to c'],
    ])
    expect(json.stderr).to.match(/^faber run: turn 1 failed: .*the upstream is down\n$/)
  })

  it('an Anthropic 529 retry says the provider is overloaded', async () => {
    await writeFile(join(dir, 'overloaded.yml'), 'model: { provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: ANTHROPIC_API_KEY }\n')
    server = await modelServer('anthropic', [
      {
        raw: (res) => {
          res.writeHead(529, { 'content-type': 'application/json', 'retry-after': '0' })
          res.end(JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }))
        },
      },
      { text: 'Answered after the wait.' },
    ])
    const ran = await faber(['run', 'overloaded.yml', '--base-url', server.url], { cwd: dir, input: 'hello\n', env: { ANTHROPIC_API_KEY: 'sk-ant-local' } })
    expect(ran.code, ran.stderr).to.equal(0)
    expect(ran.stdout).to.match(/529 from the model \(the provider is overloaded\); retrying in \d+ ms \(attempt 2 of 4\)/)
    expect(ran.stdout).to.include('Answered after the wait.')
  })

  it('provider: anthropic, in a deployment file and in faber chat, against a local Messages API server', async () => {
    // the model line as the CLI README shows it
    const file = `mode: code
plugins:
  '@faber/sandbox': {}
  '@faber/plugin-tools-fs': { root: '\${dir}/workspace' }
model: { provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: ANTHROPIC_API_KEY }
`
    await writeFile(join(dir, 'anthropic.yml'), file)
    const read = `const notes = await tools.read({ path: 'NOTES.md' })\nreturn notes.totalLines`
    server = await modelServer('anthropic', [
      { text: 'Reading.', toolCalls: [{ name: 'run_code', arguments: { code: read, description: 'count the lines of the notes' } }] },
      { text: 'It has lines.' },
    ])
    const ran = await faber(['run', 'anthropic.yml', '--base-url', server.url, '--json'], {
      cwd: dir,
      input: 'how long are the notes?\n',
      env: { ANTHROPIC_API_KEY: 'sk-ant-local' },
    })
    expect(ran.code, ran.stderr).to.equal(0)
    const events = jsonLines(ran.stdout)
    expect(
      events.filter((e) => e.type === 'nested-end').map((e) => e.name),
      ran.stdout,
    ).to.deep.equal(['read'])
    expect(events.find((e) => e.type === 'turn-end')?.outcome).to.include({ reason: 'done', text: 'It has lines.' })
    expect(server.requests.map((r) => r.path)).to.deep.equal(['/v1/messages', '/v1/messages'])
    expect(server.requests[0].headers['x-api-key']).to.equal('sk-ant-local')
    expect(server.requests[0].body).to.deep.include({ model: 'claude-sonnet-4-5', stream: true })
    expect(server.requests[0].body.tools.map((t: { name: string }) => t.name)).to.deep.equal(['run_code'])
    const results = server.requests[1].body.messages.at(-1)
    expect(results.role).to.equal('user')
    expect(results.content[0]).to.include({ type: 'tool_result', tool_use_id: 'toolu_1_0' })
    await server.close()

    server = await modelServer('anthropic', [{ text: 'Hello from the Messages API.' }])
    const chatted = await faber(
      ['chat', '--provider', 'anthropic', '--base-url', server.url, '--model', 'claude-haiku', '--root', join(dir, 'workspace'), '--json'],
      {
        cwd: dir,
        input: 'hi\n',
        env: { ANTHROPIC_API_KEY: 'sk-ant-chat', FABER_API_KEY: undefined },
      },
    )
    expect(chatted.code, chatted.stderr).to.equal(0)
    expect(jsonLines(chatted.stdout).find((e) => e.type === 'turn-end')?.outcome).to.include({ text: 'Hello from the Messages API.' })
    expect(server.requests[0].headers['x-api-key']).to.equal('sk-ant-chat')
    expect(server.requests[0].body.model).to.equal('claude-haiku')
  })

  it('faber run on a terminal: the approval answered with y + Enter, and the answer is not a user turn', async () => {
    server = await modelServer('openai', [runCode, { text: 'Summary written.' }])
    const pty = faberPty(['run', 'faber.yml', '--base-url', server.url], { cwd: dir, env: { FABER_API_KEY: 'sk-local' } })
    try {
      await pty.until('you › ')
      pty.type('summarise the notes\r')
      await pty.until('[n] reject: ')
      pty.type('y\r')
      await pty.until('Summary written.')
      await pty.until('you › ', { times: 2 })
      pty.type('/exit\r')
      expect(await pty.exited).to.equal(0)
    } finally {
      pty.kill()
    }
    expect(pty.output).to.include('wants to call write').and.include('→ allowed once')
    expect(await readFile(join(dir, 'workspace', 'SUMMARY.md'), 'utf8')).to.equal('a workspace for the example\n')
    expect(server.requests).to.have.length(2)
    const users = server.requests[1].body.messages.filter((m: { role: string }) => m.role === 'user').map((m: { content: string }) => m.content)
    expect(users).to.deep.equal(['summarise the notes'])
  })

  it('faber chat on a terminal: /exit at the approval prompt leaves at once, nothing written', async () => {
    const pty = await chatAtApproval([runCode, { text: 'never asked for' }])
    try {
      pty.type('/exit\r')
      expect(await pty.exited).to.equal(0)
    } finally {
      pty.kill()
    }
    expect(server!.requests).to.have.length(1)
    expect(server!.requests[0].body).to.deep.include({ model: 'local-model', stream: true })
    await readFile(join(dir, 'workspace', 'SUMMARY.md')).then(
      () => expect.fail('SUMMARY.md was written'),
      (error) => expect(error.code).to.equal('ENOENT'),
    )
  })

  it('faber chat on a terminal: Ctrl-C at the approval prompt cancels the turn; the chat goes on', async () => {
    const pty = await chatAtApproval([runCode, { text: 'second turn' }])
    try {
      pty.type('\x03')
      await pty.until('you › ', { times: 2 })
      pty.type('hello again\r')
      await pty.until('second turn')
      pty.type('/exit\r')
      expect(await pty.exited).to.equal(0)
    } finally {
      pty.kill()
    }
    expect(pty.output).to.include('cancelling the turn').and.include('turn 1 aborted')
    const users = server!.requests[1].body.messages.filter((m: { role: string }) => m.role === 'user').map((m: { content: string }) => m.content)
    expect(users).to.deep.equal(['summarise the notes', 'hello again'])
  })
})
