import { mkdir, writeFile } from 'node:fs/promises'
import { AgentSession, ScriptedModel } from '@faber/agent'
import { createAgent } from '@faber/core'
import { gone, value } from '@faber/core/testing'
import { expect } from 'chai'
import * as ToolsShell from '../src/index.ts'
import { Capture, commandEnv } from '../src/index.ts'
import { cleanup, deployment, linesOf, tempDir } from './helpers.ts'

// these run unconfined (confine: false) so they hold wherever the tests run; confine.spec.ts covers bubblewrap
const unconfined = { confine: false }

afterEach(cleanup)

describe('tools-shell: running a command', () => {
  it('returns the exit code and both streams, and runs in the workspace root', async () => {
    const { bash, root } = await deployment({ shell: unconfined })
    const result = await bash('pwd; echo oops >&2; exit 3')
    const v = value(result)
    expect(v).to.include({ status: 'exited', exitCode: 3, stdout: `${root}\n`, stderr: 'oops\n', stdoutBytes: root.length + 1, stderrBytes: 5 })
    expect(result.content).to.match(/^exit code 3 \(/)
    expect(result.content).to.include(`stdout:\n${root}`)
  })

  it('reports a command killed by a signal', async () => {
    const { bash } = await deployment({ shell: unconfined })
    const v = value(await bash('kill -TERM $$'))
    expect(v).to.include({ status: 'signaled', signal: 'SIGTERM' })
    expect(v.exitCode).to.equal(undefined)
  })

  it('keeps the start and end of long output and says how much it elided', async () => {
    const { bash } = await deployment({ shell: { ...unconfined, outputBytes: 200 } })
    const v = value(await bash('seq 1 2000; seq 1 500 >&2'))
    const full = Array.from({ length: 2000 }, (_, i) => `${i + 1}\n`).join('')
    expect(v.stdoutBytes).to.equal(full.length)
    expect(v.stdout.startsWith(full.slice(0, 100))).to.equal(true)
    expect(v.stdout.endsWith(full.slice(-100))).to.equal(true)
    expect(v.stdout).to.include(`[… ${full.length - 200} bytes elided`)
    expect(v.stderr).to.include('bytes elided')
    expect(v.stderr.endsWith('500\n')).to.equal(true)
  })

  it('never cuts a UTF-8 character in half at the elision', () => {
    for (let head = 1; head < 8; head++) {
      const capture = new Capture(head, head + 1)
      capture.push(Buffer.from('é€😀'.repeat(20)))
      const { text } = capture.take()
      expect(text, `head ${head}`).not.to.include('\uFFFD')
    }
  })

  it('kills a command and the processes it started when it times out', async () => {
    const { bash, file } = await deployment({ shell: { ...unconfined, killGraceMs: 200 } })
    const result = await bash(`sleep 30 & echo $! > pids; (sleep 30 & echo $! >> pids; wait) & wait`, { timeoutMs: 300 })
    const v = value(result)
    expect(v.status).to.equal('timed-out')
    expect(result.content).to.match(/^timed out after/)
    for (const pid of await linesOf(file('pids'), 2)) expect(await gone(Number(pid)), `pid ${pid}`).to.equal(true)
  })

  it('a command that ignores SIGTERM is killed after the grace period', async () => {
    const { bash } = await deployment({ shell: { ...unconfined, killGraceMs: 100 } })
    const v = value(await bash(`trap '' TERM; sleep 30 & wait; sleep 30`, { timeoutMs: 200 }))
    expect(v.status).to.equal('timed-out')
  })

  it('an abort kills the whole process group before the call returns', async () => {
    const { bash, file } = await deployment({ shell: unconfined })
    const controller = new AbortController()
    const pending = bash('echo $$ > pids; sleep 30 & echo $! >> pids; wait', { signal: controller.signal })
    const pids = await linesOf(file('pids'), 2)
    controller.abort()
    const result = await pending
    expect(result.isError && result.error.code).to.equal('ABORTED')
    for (const pid of pids) expect(await gone(Number(pid), 0), `pid ${pid}`).to.equal(true)
  })

  it('processes a command leaves behind are killed when it ends (background mode is for long-running work)', async () => {
    const { bash, file } = await deployment({ shell: unconfined })
    value(await bash('sleep 30 > /dev/null 2>&1 & echo $! > pids'))
    const [pid] = await linesOf(file('pids'), 1)
    expect(await gone(Number(pid))).to.equal(true)
  })

  it('a command too long for the kernel is refused with what to do; one just below the limit runs', async () => {
    const { bash } = await deployment({ shell: unconfined })
    const long = await bash(`echo ${'a'.repeat(200_000)}`)
    expect(long.isError && long.error.toolCode).to.equal('SHELL_COMMAND_TOO_LONG')
    expect(long.content).to.match(/the command is 200005 bytes, more than the 131071 .* write it to a script file/)
    const v = value(await bash(`: ${'é'.repeat(65_000)}; echo ran`))
    expect(v.stdout).to.equal('ran\n')
  })

  it('output that is not UTF-8 arrives with replacement characters, NUL bytes kept', async () => {
    const { bash } = await deployment({ shell: unconfined })
    const v = value(await bash(`printf 'a\\377\\376b\\000c\\303'; printf '\\351t\\351' >&2`))
    expect(v.stdout).to.equal('a\uFFFD\uFFFDb\u0000c\uFFFD')
    expect(v.stderr).to.equal('\uFFFDt\uFFFD')
    expect(v).to.include({ stdoutBytes: 7, stderrBytes: 3 })
  })

  it('passes only the allowed environment, plus what the deployment sets', async () => {
    process.env.FABER_TEST_SECRET = 'hunter2'
    process.env.LC_FABER_TEST = 'kept'
    try {
      const { bash } = await deployment({ shell: { ...unconfined, env: { set: { CI: 'true' } } } })
      const env = value(await bash('env')).stdout as string
      expect(env).not.to.include('FABER_TEST_SECRET')
      expect(env).not.to.include('hunter2')
      expect(env).to.include('LC_FABER_TEST=kept')
      expect(env).to.include('CI=true')
      expect(env).to.match(/^PATH=/m)
    } finally {
      delete process.env.FABER_TEST_SECRET
      delete process.env.LC_FABER_TEST
    }
    expect(commandEnv({ allow: ['A', 'B_*'], set: { C: '3' } }, { A: '1', AB: 'x', B_X: '2', B: 'y' })).to.deep.equal({ A: '1', B_X: '2', C: '3' })
  })

  it('PATH loses the entries a command could write to: empty, relative, inside the root', async () => {
    const saved = process.env.PATH!
    process.env.PATH = `:.:bin:${saved}`
    let deployed: Awaited<ReturnType<typeof deployment>>
    try {
      deployed = await deployment({ shell: unconfined })
    } finally {
      process.env.PATH = saved
    }
    const { bash, file } = deployed
    // a git planted by an earlier command, which a later `git --version` (approved, say) must not run
    await mkdir(file('bin'))
    await writeFile(file('bin/git'), '#!/bin/sh\necho planted\n', { mode: 0o755 })
    await writeFile(file('git'), '#!/bin/sh\necho planted\n', { mode: 0o755 })
    const v = value(await bash('echo "$PATH"; git --version'))
    expect(v.stdout).not.to.include('planted')
    expect(v.stdout.split('\n')[0]).to.equal(saved)
    const root = '/work/ws'
    expect(commandEnv({ allow: ['PATH'], set: {} }, { PATH: `/usr/bin:${root}:${root}/node_modules/.bin:${root}x/bin:rel:` }, root)).to.deep.equal({
      PATH: `/usr/bin:${root}x/bin`,
    })
    // a PATH the deployment sets is its choice
    expect(commandEnv({ allow: [], set: { PATH: '.:/bin' } }, {}, root)).to.deep.equal({ PATH: '.:/bin' })
  })

  it('refuses to start without bubblewrap unless confine: false is explicit', async () => {
    const root = await tempDir()
    const path = process.env.PATH
    process.env.PATH = root // no bwrap on it
    let error: unknown
    try {
      error = await deployment({ shell: { root } }).catch((caught) => caught)
    } finally {
      process.env.PATH = path
    }
    expect(String(error)).to.match(/commands cannot be confined: bwrap is not installed.*set confine: false/)
  })

  it('refuses to start when the configured bwrap is missing or cannot start a sandbox; confine: false starts', async () => {
    const missing = await deployment({ shell: { bwrap: '/nonexistent/bwrap' } }).catch((caught) => caught)
    expect(String(missing)).to.match(/commands cannot be confined: bwrap was configured as "\/nonexistent\/bwrap", which does not exist.*set confine: false/)
    // a bwrap that exits 1, as one does where user namespaces are disabled
    const failing = await deployment({ shell: { bwrap: '/bin/false' } }).catch((caught) => caught)
    expect(String(failing)).to.match(/commands cannot be confined: bwrap could not start a sandbox.*set confine: false/)
    const { ctx, bash } = await deployment({ shell: { bwrap: '/nonexistent/bwrap', confine: false } })
    expect(ctx.tools.get('bash')!.annotations).to.include({ confined: false })
    expect(ctx.tools.get('bash')!.annotations.status).to.match(/^NOT confined \(confine: false\)/)
    expect(value(await bash('echo ran')).stdout).to.equal('ran\n')
  })

  it('rejects unknown config keys, nested ones too', () => {
    expect(() => ToolsShell.Config({ root: '/tmp', sandbox: { netwrok: true } } as never)).to.throw(/netwrok/)
    expect(() => ToolsShell.Config({ root: '/tmp', confined: false } as never)).to.throw(/confined/)
  })

  it('says in its status whether it is confined', async () => {
    const { ctx } = await deployment({ shell: unconfined })
    expect(ctx.tools.get('bash')!.annotations.status).to.match(/^NOT confined \(confine: false\)/)
  })

  it('takes its name from the config, and is exclusive', async () => {
    const { ctx, call } = await deployment({ shell: { ...unconfined, name: 'sh' } })
    expect(ctx.tools.get('sh')).to.not.equal(undefined)
    expect(ctx.tools.get('sh_output')).to.not.equal(undefined)
    expect(ctx.tools.executionMode({ name: 'sh', arguments: { command: 'ls' } })).to.equal('exclusive')
    expect(value(await call('sh', { command: 'echo hi' })).stdout).to.equal('hi\n')
  })
})

describe('tools-shell: background jobs', () => {
  it('returns a job id at once; the output tool waits for the end and returns what is new', async () => {
    const { call, bash } = await deployment({ shell: unconfined })
    const started = value(await call('bash', { command: 'for i in 1 2 3; do echo $i; sleep 0.05; done', background: true }))
    expect(started).to.include({ status: 'running', jobId: 'job-1' })
    const done = value(await call('bash_output', { jobId: 'job-1', waitMs: 10000 }))
    expect(done).to.include({ status: 'exited', exitCode: 0, stdout: '1\n2\n3\n', jobId: 'job-1' })
    // a finished job that was read is gone
    const again = await call('bash_output', { jobId: 'job-1' })
    expect(again.isError && again.error.toolCode).to.equal('SHELL_NO_SUCH_JOB')
    expect(value(await bash('echo still fine')).stdout).to.equal('still fine\n')
  })

  it('each read returns only the output since the last one; stop kills the job and its children', async () => {
    const { call, file } = await deployment({ shell: { ...unconfined, killGraceMs: 200 } })
    const { jobId } = value(
      await call('bash', { command: 'sleep 30 & echo $! > pids; n=0; while true; do n=$((n+1)); echo $n; sleep 0.02; done', background: true }),
    )
    const [child] = await linesOf(file('pids'), 1)
    const first = value(await call('bash_output', { jobId, waitMs: 150 }))
    expect(first.status).to.equal('running')
    const second = value(await call('bash_output', { jobId, waitMs: 150 }))
    const a = first.stdout.trim().split('\n').map(Number)
    const b = second.stdout.trim().split('\n').map(Number)
    expect(a[0]).to.equal(1)
    expect(b[0]).to.equal(a[a.length - 1] + 1)
    const stopped = await call('bash_stop', { jobId })
    expect(value(stopped).status).to.equal('stopped')
    expect(stopped.content).to.match(/^stopped;/)
    expect(await gone(Number(child))).to.equal(true)
  })

  it("an agent cannot see another agent's jobs", async () => {
    const { ctx, call } = await deployment({ shell: unconfined })
    const alice = createAgent(ctx, { name: 'alice' })
    const bob = createAgent(ctx, { name: 'bob' })
    const { jobId } = value(await call('bash', { command: 'sleep 30', background: true }, { agent: alice }))
    const peek = await call('bash_output', { jobId }, { agent: bob })
    expect(peek.isError && peek.error.message).to.match(/there is no job "job-1"/)
    expect(value(await call('bash_stop', { jobId }, { agent: alice })).status).to.equal('stopped')
  })

  it("an MCP session cannot see another session's jobs, and its end ends its own", async () => {
    const { ctx, call, file } = await deployment({ shell: unconfined })
    const started = value(await call('bash', { command: 'echo $$ > a; sleep 30 & echo $! >> a; wait', background: true }, { session: 's1' }))
    value(await call('bash', { command: 'echo $$ > b; sleep 30 & echo $! >> b; wait', background: true }, { session: 's2' }))
    const peek = await call('bash_output', { jobId: started.jobId }, { session: 's2' })
    expect(peek.isError && peek.error.message).to.match(/there is no job "job-1"; your jobs: job-2/)
    const [a, b] = [await linesOf(file('a'), 2), await linesOf(file('b'), 2)]
    ctx.emit('tools/session-end', { session: 's1' })
    for (const pid of a) expect(await gone(Number(pid)), `pid ${pid}`).to.equal(true)
    for (const pid of b) expect(await gone(Number(pid), 0), `pid ${pid}`).to.equal(false)
    expect(value(await call('bash_stop', { jobId: 'job-2' }, { session: 's2' })).status).to.equal('stopped')
  })

  it('limits how many jobs run at once', async () => {
    const { call } = await deployment({ shell: { ...unconfined, jobs: { max: 1 } } })
    value(await call('bash', { command: 'sleep 30', background: true }))
    const second = await call('bash', { command: 'sleep 30', background: true })
    expect(second.isError && second.error.toolCode).to.equal('SHELL_TOO_MANY_JOBS')
  })

  it('jobs die with the session of the agent that started them', async () => {
    const { ctx, file } = await deployment({ shell: unconfined })
    const agent = createAgent(ctx, { name: 'main' })
    const session = new AgentSession(ctx, {
      agent,
      model: new ScriptedModel([
        { toolCalls: [{ name: 'bash', arguments: { command: 'echo $$ > pids; sleep 30 & echo $! >> pids; wait', background: true } }] },
        { text: 'started' },
      ]),
    })
    await session.send('start a job')
    const pids = await linesOf(file('pids'), 2)
    for (const pid of pids) expect(await gone(Number(pid), 0), `pid ${pid}`).to.equal(false)
    session.dispose()
    for (const pid of pids) expect(await gone(Number(pid)), `pid ${pid}`).to.equal(true)
  })

  it('jobs die when the plugin is disposed, and with the agent that started them', async () => {
    const { ctx, call, file } = await deployment({ shell: unconfined })
    value(await call('bash', { command: 'echo $$ > a; sleep 30 & echo $! >> a; wait', background: true }))
    const owner = ctx.plugin({ name: 'owner', apply: () => {} })
    await owner
    const agent = createAgent(owner.ctx, { name: 'temp' })
    value(await call('bash', { command: 'echo $$ > b; sleep 30 & echo $! >> b; wait', background: true }, { agent }))
    const a = await linesOf(file('a'), 2)
    const b = await linesOf(file('b'), 2)
    owner.dispose()
    for (const pid of b) expect(await gone(Number(pid)), `agent job pid ${pid}`).to.equal(true)
    for (const pid of a) expect(await gone(Number(pid), 0), `plugin job pid ${pid}`).to.equal(false)
    await ctx.stop()
    for (const pid of a) expect(await gone(Number(pid)), `plugin job pid ${pid}`).to.equal(true)
  })
})
