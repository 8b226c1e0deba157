import { existsSync } from 'node:fs'
import { readFile, writeFile } from 'node:fs/promises'
import type { ToolResult } from '@faber/core'
import { value } from '@faber/core/testing'
import Approval, { type ApprovalQuery } from '@faber/plugin-approval'
import FsObservation from '@faber/plugin-fs-observation'
import * as Guards from '@faber/plugin-guards'
import ToolCordis, { inspect, renderReport } from '@faber/plugin-tool-cordis'
import ToolsFs from '@faber/plugin-tools-fs'
import Sandbox from '@faber/sandbox'
import { expect } from 'chai'
import { cleanup, deployment, linesOf, requireBubblewrap } from './helpers.ts'

afterEach(cleanup)

function denied(result: ToolResult) {
  expect(result.isError, result.content).to.equal(true)
  return result.isError ? result.error : undefined
}

describe('tools-shell under the policies', () => {
  it("guards' argument rules apply to command", async () => {
    const { bash } = await deployment({
      shell: { confine: false },
      plugins: (ctx) =>
        ctx.plugin(Guards, { deny: [{ name: 'no-curl', tools: ['bash'], argument: '$.command', pattern: '\\bcurl\\b', reason: 'No network tools.' }] }),
    })
    const error = denied(await bash('echo hi && curl https://example.com'))
    expect(error?.code).to.equal('DENIED')
    expect(error?.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'guards' })
    expect(error?.message).to.match(/guard rule "no-curl" denied "bash".*No network tools/)
    expect(value(await bash('echo hi')).stdout).to.equal('hi\n')
    // a pattern over the text, not over what the shell runs (the README says so)
    expect(value(await bash("c''url --version > /dev/null 2>&1; echo passed")).stdout).to.equal('passed\n')
  })

  it('approval command patterns: listed commands run, rm -rf is rejected, anything else is asked (the README rules)', async () => {
    // each hides a second effect behind an allowed command: none may match, so each is asked about
    const chained = [
      'git status; touch pwned',
      'git diff $(touch pwned)',
      'git status && touch pwned',
      'git diff > pwned',
      'git diff `touch pwned`',
      'git status\ntouch pwned',
      'git status | touch pwned',
      'git diff \'a\'"$(touch pwned)"',
    ]
    const asked: string[] = []
    const { bash, file } = await deployment({
      shell: { confine: false },
      plugins: (ctx) => {
        ctx.plugin(Approval, {
          rules: [
            { tool: 'bash', command: 'git status', decision: 'allow' },
            { tool: 'bash', command: 'git diff *', decision: 'allow' },
            { tool: 'bash', command: 'rm -rf *', decision: 'reject' },
          ],
        })
        ctx.plugin({
          name: 'operator',
          apply: (ctx) =>
            ctx.on('approval/request', (query: ApprovalQuery) => {
              asked.push((query.arguments as { command: string }).command)
              return { decision: 'reject' }
            }),
        })
      },
    })
    await writeFile(file('keep.txt'), 'precious')
    // both ran (not a repository: git's own exit code)
    expect(value(await bash('git status')).status).to.equal('exited')
    expect(value(await bash('git diff --stat')).status).to.equal('exited')
    for (const command of chained) {
      expect(denied(await bash(command))?.code, command).to.equal('DENIED')
    }
    expect(denied(await bash('ls; rm -rf keep.txt'))?.deniedBy).to.deep.include({ stage: 'approval' })
    expect(existsSync(file('pwned'))).to.equal(false)
    expect(await readFile(file('keep.txt'), 'utf8')).to.equal('precious')
    expect(asked).to.deep.equal(chained)
  })

  it('a remembered answer grants that command again, and nothing more', async () => {
    let answers = 0
    const { bash } = await deployment({
      shell: { confine: false },
      plugins: (ctx) => {
        ctx.plugin(Approval, {})
        ctx.plugin({
          name: 'operator',
          apply: (ctx) =>
            ctx.on('approval/request', () => {
              answers++
              return { decision: answers === 1 ? 'allow' : 'reject', remember: answers === 1 ? 'session' : 'once' }
            }),
        })
      },
    })
    expect(value(await bash('echo once')).stdout).to.equal('once\n')
    expect(value(await bash('echo once')).stdout).to.equal('once\n')
    expect(answers).to.equal(1)
    expect(denied(await bash('echo once; id'))?.code).to.equal('DENIED')
    expect(answers).to.equal(2)
  })

  it('fs-observation: after a command, an edit needs a fresh read', async () => {
    const { ctx, bash, file, root } = await deployment({
      shell: { confine: false },
      plugins: (ctx, root) => {
        ctx.plugin(ToolsFs, { root })
        ctx.plugin(FsObservation)
      },
    })
    const call = (name: string, args: object) => ctx.tools.execute({ callId: name, name, arguments: args, signal: new AbortController().signal })
    await writeFile(file('a.txt'), 'one\n')
    value(await call('read', { path: 'a.txt' }))
    value(await bash('true')) // changes nothing, but a command may change anything
    const error = denied(await call('edit', { path: 'a.txt', oldString: 'one', newString: 'two' }))
    expect(error?.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'fs-observation' })
    expect(error?.message).to.include('a command has run since you last looked at "a.txt", so it may have changed — read it again, then retry')
    value(await call('read', { path: 'a.txt' }))
    value(await call('edit', { path: 'a.txt', oldString: 'one', newString: 'two' }))
    // a write over a file the command made is refused until it is read; a new file can still be created
    value(await bash(`echo made > ${root}/b.txt`))
    expect(denied(await call('write', { path: 'a.txt', content: 'x' }))?.message).to.include('a command has run since')
    expect(denied(await call('write', { path: 'b.txt', content: 'x' }))?.message).to.include('which you have not read')
    value(await call('write', { path: 'c.txt', content: 'new' }))
    // a denied command ran nothing, so it leaves observations alone
    ctx.tools.guard((exec) => (exec.name === 'bash' ? 'no shell now' : undefined))
    denied(await bash('true'))
    value(await call('edit', { path: 'c.txt', oldString: 'new', newString: 'newer' }))
  })

  it('fs-observation: a background job that changes a file after it was read makes the edit fail', async () => {
    const {
      ctx,
      call: callTool,
      file,
    } = await deployment({
      shell: { confine: false },
      plugins: (ctx, root) => {
        ctx.plugin(ToolsFs, { root })
        ctx.plugin(FsObservation)
      },
    })
    const call = (name: string, args: object) => ctx.tools.execute({ callId: name, name, arguments: args, signal: new AbortController().signal })
    await writeFile(file('a.txt'), 'one\n')
    value(await callTool('bash', { command: 'mkfifo go && echo ready > ready && read x < go && echo changed > a.txt && echo done > done', background: true }))
    await linesOf(file('ready'), 1)
    // read after the job started: no command finished since, so this read vouches for the file
    value(await call('read', { path: 'a.txt' }))
    await writeFile(file('go'), 'go\n')
    await linesOf(file('done'), 1)
    const error = denied(await call('edit', { path: 'a.txt', oldString: 'one', newString: 'two' }))
    expect(error?.message).to.include('"a.txt" changed since you read it — read it again, then retry')
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('changed\n')
  })

  it('from a run_code program: several commands, keeping only what matters', async () => {
    const { ctx } = await deployment({ mode: 'code', shell: { confine: false }, plugins: (ctx) => ctx.plugin(Sandbox, { poolSize: 1 }) })
    const code = `
      const listing = await tools.bash({ command: 'seq 1 1000' })
      const failing = await tools.bash({ command: 'echo broken >&2; exit 2' })
      return { lines: listing.stdout.trim().split('\\n').length, last: listing.stdout.trim().split('\\n').pop(), code: failing.exitCode, err: failing.stderr }`
    const result = await ctx.tools.execute({ callId: 'p', name: 'run_code', arguments: { code, description: 'shell' }, signal: new AbortController().signal })
    expect(value(result).result).to.deep.equal({ lines: 1000, last: '1000', code: 2, err: 'broken\n' })
    // model-direct, the tool collapses under code mode like any other
    const direct = await ctx.tools.execute({ callId: 'd', name: 'bash', arguments: { command: 'id' }, signal: new AbortController().signal })
    expect(denied(direct)?.code).to.equal('UNKNOWN_TOOL')
  })
})

describe('tools-shell in the inspector', () => {
  it('the report and its text say whether the shell is confined', async () => {
    const { ctx } = await deployment({ shell: { confine: false }, plugins: (ctx) => ctx.plugin(ToolCordis) })
    const entry = inspect(ctx).tools[0].visible.find((tool) => tool.name === 'bash')
    expect(entry?.status).to.match(/^NOT confined \(confine: false\)/)
    expect(renderReport(inspect(ctx))).to.match(/ {2}bash: NOT confined \(confine: false\)/)
  })

  it('and when it is', async function () {
    requireBubblewrap(this)
    const { ctx } = await deployment({ plugins: (ctx) => ctx.plugin(ToolCordis) })
    expect(renderReport(inspect(ctx))).to.match(/ {2}bash: confined by bubblewrap: /)
  })
})
