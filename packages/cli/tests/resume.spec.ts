// `faber run` killed while its model's program waits on a person, then started again on the same session log: the
// program runs again from the log (the write it made before the wait is not made twice), the call it waited on gets
// the answer given meanwhile (a grant imported with `faber grants` into the shared store, or the person asked again),
// and the model's turn goes on with the program's result. real processes, killed with SIGKILL, on both V8 backends.
// a second process continuing the same session meanwhile is refused: the program runs in one process only

import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect } from 'chai'
import { checkpointing, faber, faberPty, jsonLines } from './helpers.ts'

const PROGRAM = `const a = await tools.write({ path: 'log1.txt', content: 'made before the wait' })
const b = await tools.write({ path: 'out.txt', content: 'approved' })
return [a.path, b.path]`

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function deploymentFile(backend: string, script: string) {
  return `${checkpointing(backend)}  '@faber/plugin-approval':
    require: [write]
    grantWatchMs: 50
    rules:
      - { tool: write, arguments: { '$.path': '^log' }, decision: allow }
  '@faber/plugin-approval#TerminalAnswerer': {}
model:
  provider: scripted
  script:
${script}
session: { log: '\${dir}/session.jsonl' }
`
}

const FIRST = `    - toolCalls: [{ id: run1, name: run_code, arguments: { code: ${JSON.stringify(PROGRAM)}, description: writes out.txt } }]\n    - text: not reached`
const AFTER = '    - text: the program is done'

for (const backend of ['@faber/sandbox', '@faber/sandbox-isolate']) {
  describe(`faber run resumes a program checkpointed before it was killed: ${backend}`, function () {
    this.timeout(120_000)
    let dir: string
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'faber-resume-'))
      await mkdir(join(dir, 'ws'))
      await writeFile(join(dir, 'faber.yml'), deploymentFile(backend, FIRST))
    })
    afterEach(() => rm(dir, { recursive: true, force: true }))

    /** the first process: asked about out.txt at its terminal, nobody answers, the program is checkpointed, and the process is killed */
    async function killedWhileWaiting() {
      const pty = faberPty(['run', 'faber.yml'], { cwd: dir })
      try {
        await pty.until('you › ')
        pty.type('go\r')
        await pty.until('out.txt')
        const log = join(dir, 'session.jsonl')
        while (!(await readFile(log, 'utf8')).includes('"type":"checkpoint"')) await sleep(20)
        // the faber process itself (its session id names its pid), not only the terminal it runs on
        const session = jsonLines(await readFile(log, 'utf8')).find((r) => r.type === 'session')
        process.kill(Number(String(session?.id).split('-')[1]), 'SIGKILL')
        await pty.exited
      } finally {
        pty.kill()
      }
      const made = await stat(join(dir, 'ws', 'log1.txt'), { bigint: true })
      expect(existsSync(join(dir, 'ws', 'out.txt')), 'out.txt waits for the answer').to.equal(false)
      return made.mtimeNs
    }

    async function expectResumed(made: bigint) {
      expect(await readFile(join(dir, 'ws', 'out.txt'), 'utf8')).to.equal('approved')
      expect((await stat(join(dir, 'ws', 'log1.txt'), { bigint: true })).mtimeNs, 'log1.txt was not written again').to.equal(made)
      const records = jsonLines(await readFile(join(dir, 'session.jsonl'), 'utf8'))
      const written = records.filter((r) => r.type === 'nested-result' && r.name === 'write' && r.value?.path)
      expect(written.map((r) => r.value.path)).to.deep.equal(['log1.txt', 'out.txt'])
      const result = records.filter((r) => r.type === 'result' && r.callId === 'run1')
      expect(result).to.have.length(1)
      expect(result[0]).to.deep.include({ isError: false, value: { logs: [], result: ['log1.txt', 'out.txt'] } })
      expect(records.at(-1)).to.include({ type: 'turn-end', turn: 1, reason: 'done' })
      const left = await faber(['grants', 'pending', '--store', join(dir, 'faber.db'), '--json'])
      expect(JSON.parse(left.stdout), 'no question is left in the store').to.deep.equal([])
    }

    it('with the answer given while it was down: a grant imported into the store', async () => {
      const made = await killedWhileWaiting()
      const grants = join(dir, 'grants.json')
      await writeFile(grants, JSON.stringify({ version: 1, grants: [{ id: 'out', tool: 'write', arguments: { '$.path': '^out\\.txt$' }, decision: 'allow' }] }))
      expect((await faber(['grants', 'import', grants, '--store', join(dir, 'faber.db')])).code).to.equal(0)
      await writeFile(join(dir, 'faber.yml'), deploymentFile(backend, AFTER))
      const second = await faber(['run', 'faber.yml'], { cwd: dir, timeoutMs: 60_000 })
      expect(second.stderr).to.equal('')
      expect(second.code).to.equal(0)
      expect(second.stdout).to.contain('running it again').and.contain('the program is done')
      await expectResumed(made)
    })

    it('with the question answered in the store while it was down (faber grants answer): the answer is not lost', async () => {
      const made = await killedWhileWaiting()
      const store = join(dir, 'faber.db')
      const pending = JSON.parse((await faber(['grants', 'pending', '--store', store, '--json'])).stdout)
      expect(pending.map((q: { tool: string; arguments: unknown }) => [q.tool, q.arguments])).to.deep.equal([
        ['write', { path: 'out.txt', content: 'approved' }],
      ])
      expect((await faber(['grants', 'answer', pending[0].id, 'allow', '--store', store])).code).to.equal(0)
      await writeFile(join(dir, 'faber.yml'), deploymentFile(backend, AFTER))
      const second = await faber(['run', 'faber.yml'], { cwd: dir, timeoutMs: 60_000 })
      expect(second.stderr).to.equal('')
      expect(second.code).to.equal(0)
      await expectResumed(made)
      const decided = jsonLines(await readFile(join(dir, 'session.jsonl'), 'utf8')).filter((r) => r.event === 'approval/decided')
      expect(decided.at(-1)?.detail).to.include({ outcome: 'allowed', answeredBy: 'approval-store' })
    })

    /** faber run again, the person asked at its terminal answers yes; `meanwhile`: while the question is open */
    async function answeredAtTerminal(meanwhile: () => Promise<void> = async () => {}) {
      const made = await killedWhileWaiting()
      await writeFile(join(dir, 'faber.yml'), deploymentFile(backend, AFTER))
      const pty = faberPty(['run', 'faber.yml'], { cwd: dir })
      try {
        await pty.until('out.txt')
        await meanwhile()
        pty.type('y\r')
        await pty.until('the program is done')
        await pty.until('you › ')
        pty.type('/exit\r')
        expect(await pty.exited).to.equal(0)
      } finally {
        pty.kill()
      }
      await expectResumed(made)
    }

    it('with the person asked again at the terminal after the restart', () => answeredAtTerminal())

    // the lock is the session log's, whatever the sandbox: one backend is enough
    if (backend === '@faber/sandbox') {
      it('continued by two processes at once: the second says another process has the session, and the program runs once', () =>
        // while the first runs the program again, asking the person at its terminal
        answeredAtTerminal(async () => {
          const second = await faber(['run', 'faber.yml'], { cwd: dir, timeoutMs: 60_000 })
          expect(second.code).to.not.equal(0)
          expect(second.stderr).to.match(/another process \(pid \d+\) has this session log open: it is continuing the session/)
          expect(second.stdout).to.not.contain('running it again')
        }))
    }
  })
}
