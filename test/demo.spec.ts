// the demo, run as a person would (`faber demo`, a real child process), and its key outcomes checked.

import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect } from 'chai'
import { faber, jsonLines, type Ran } from '../packages/cli/tests/helpers.ts'

describe('faber demo', () => {
  let json: Ran
  let records: Record<string, any>[]
  let log: Record<string, any>[]
  before(async function () {
    this.timeout(60_000)
    const dir = await mkdtemp(join(tmpdir(), 'faber-demo-test-'))
    try {
      json = await faber(['demo', '--json', '--log', join(dir, 'session.jsonl')])
      records = jsonLines(json.stdout)
      log = jsonLines(await readFile(join(dir, 'session.jsonl'), 'utf8'))
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  const find = (type: string) => records.filter((r) => r.type === type)

  // how long it takes is bench/'s business (bench/transcript.ts), not a test's
  it('exits 0', () => {
    expect(json.code, json.stderr).to.equal(0)
  })

  it('composes a code-mode deployment with the standard plugins', () => {
    const [deployment] = find('deployment')
    expect(deployment.mode).to.equal('code')
    expect(deployment.plugins).to.include.members([
      '@faber/sandbox',
      '@faber/plugin-tools-fs',
      '@faber/plugin-fs-observation',
      '@faber/plugin-guards',
      '@faber/plugin-approval',
      '@faber/plugin-tool-cordis',
    ])
  })

  it('rejects the direct native call in the core, with the route, before any policy', () => {
    const [first] = find('call-end')
    expect(first.call.name).to.equal('write')
    expect(first.result.code).to.equal('UNKNOWN_TOOL')
    expect(first.result.message).to.include('call tools.write(...) inside a run_code program')
    expect(first.result.trace).to.deep.equal([{ stage: 'create', decision: 'collapsed', by: 'core' }])
    const [report] = find('report')
    const traced = report.report.calls.find((c: any) => c.callId === first.call.id)
    expect(traced.reachedPolicy).to.equal(false)
    expect(traced.note).to.match(/no policy saw it/)
  })

  it('runs the program: parallel reads, nested calls through the pipeline, a summary', () => {
    const ends = find('call-end')
    expect(ends[1].call.name).to.equal('run_code')
    expect(ends[1].result.isError).to.equal(false)
    const nested = find('nested-start').map((r) => r.name)
    expect(nested.slice(0, 3).sort()).to.deep.equal(['list', 'read', 'read'])
    const [{ outcome, facts, files }] = find('outcome')
    expect(facts.overlapped).to.be.at.least(2)
    expect(outcome).to.include({ reason: 'done', steps: 3 })
    expect(files['src/greet.ts']).to.include('config.greeting')
    expect(files['TODO.md']).to.include('- [x] make the greeting configurable')
    expect(files['CHANGELOG.md']).to.match(/^# Changelog/)
  })

  it('has fs-observation refuse the edit of an unread file, and the program recover', () => {
    const nested = find('nested-end').map((r) => ({ name: r.name, path: r.arguments.path, code: r.result.code, by: r.result.deniedBy?.plugin }))
    const refused = nested.findIndex((n) => n.name === 'edit' && n.path === 'TODO.md' && n.code === 'DENIED')
    expect(refused, JSON.stringify(nested)).to.be.at.least(0)
    expect(nested[refused].by).to.equal('fs-observation')
    expect(nested.slice(refused + 1, refused + 3)).to.deep.equal([
      { name: 'read', path: 'TODO.md', code: undefined, by: undefined },
      { name: 'edit', path: 'TODO.md', code: undefined, by: undefined },
    ])
  })

  it('says where in the program each nested call was made', () => {
    const program: string = JSON.parse(find('call-start').find((r) => r.call.name === 'run_code')?.call.arguments).code
    const lines = program.split('\n')
    const starts = find('nested-start')
    expect(starts).to.have.length(8)
    // each call's line holds the call, its column the tool's name
    for (const { name, site } of starts) expect(lines[site.line - 1].slice(site.column - 1)).to.match(new RegExp(`^${name}\\(`))
    // the edit the policy refused and the one after the read are the same text, on lines of their own
    const ticks = starts.filter((r) => r.name === 'edit' && r.arguments.path === 'TODO.md').map((r) => r.site.line)
    expect(ticks).to.have.length(2)
    expect(ticks[0]).to.be.below(ticks[1])
    expect(lines[ticks[0] - 1].trim())
      .to.equal(lines[ticks[1] - 1].trim())
      .and.equal('await tools.edit(tick)')
    const logged = log.filter((r) => r.type === 'nested-call').map((r) => r.site)
    expect(logged).to.deep.equal(starts.map((r) => r.site))
  })

  it('asks approval for the write, granted by the rules answerer', () => {
    const approvals = find('approval').map((r) => ({ event: r.event, tool: r.detail.tool, outcome: r.detail.outcome, by: r.detail.answeredBy }))
    expect(approvals).to.deep.equal([
      { event: 'approval/asked', tool: 'write', outcome: undefined, by: undefined },
      { event: 'approval/decided', tool: 'write', outcome: 'allowed', by: 'approval-rules' },
    ])
  })

  it('logs the session: nested calls with their outer call, the denial, the approval', () => {
    const nested = log.filter((r) => r.type === 'nested-result')
    expect(nested.map((r) => r.outerCallId)).to.satisfy((ids: string[]) => ids.length === 8 && ids.every((id) => id === 'call_2'))
    expect(nested.find((r) => r.code === 'DENIED')?.deniedBy).to.deep.equal({ stage: 'pre-execute', plugin: 'fs-observation' })
    expect(log.filter((r) => r.type === 'approval').map((r) => r.event)).to.deep.equal(['approval/asked', 'approval/decided'])
    expect(log.at(-1)).to.include({ type: 'turn-end', reason: 'done' })
  })

  it('prints a plain transcript when piped', async function () {
    this.timeout(60_000)
    const plain = await faber(['demo'])
    expect(plain.code, plain.stderr).to.equal(0)
    expect(plain.stdout).not.to.include('\x1b[')
    expect(plain.stdout).to.include('UNKNOWN_TOOL')
    expect(plain.stdout).to.include("the inspector's view of agent main")
    expect(plain.stdout).to.include('what happened')
  })
})
