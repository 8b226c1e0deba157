// a long program on a terminal folds its nested calls into one progress line, keeping failures and a summary;
// --verbose and piped output show every call

import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect } from 'chai'
import { faber, faberPty, jsonLines } from './helpers.ts'

const CALLS = 200
const PROGRAM = `let failed = 0
await Promise.all(Array.from({ length: ${CALLS} }, (_, i) => i % 50 === 49
  ? tools.read({ path: 'missing-' + i + '.txt' }).catch(() => failed++)
  : tools.list({ path: '.' })))
return { failed }`

const DEPLOYMENT = `mode: code
plugins:
  '@faber/sandbox': {}
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
model:
  provider: scripted
  script:
    - toolCalls: [{ name: run_code, arguments: { code: ${JSON.stringify(PROGRAM)}, description: many calls } }]
    - text: all done
`

describe('faber: long programs', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-progress-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'faber.yml'), DEPLOYMENT)
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  async function onTerminal(args: string[]) {
    const pty = faberPty(['run', ...args], { cwd: dir })
    try {
      await pty.until('you › ')
      pty.type('go\r')
      await pty.until('you › ', { times: 2 })
      pty.type('/exit\r')
      expect(await pty.exited).to.equal(0)
    } finally {
      pty.kill()
    }
    return pty.output
  }

  it('on a terminal: one progress line, the failures and a summary', async () => {
    const output = await onTerminal([])
    expect(output).to.include(`${CALLS} nested call(s): ${CALLS - 4} ok, 4 failed`)
    expect(output.match(/✗ read FS_NOT_FOUND|✗ read TOOL_FAILED/g) ?? []).to.have.length(4)
    expect(output).not.to.include('↳ tools.list')
    expect(output).to.match(/run_code: [\d,]+ nested call\(s\) done · \d+ running · \d+ failed · \d+\.\d s/)
    expect(output).to.include('all done')
  })

  it('--verbose on a terminal, and piped output, show every call; --json has every record', async () => {
    const verbose = await onTerminal(['--verbose'])
    expect(verbose.match(/↳ tools\.list/g) ?? []).to.have.length(CALLS - 4)
    const piped = await faber(['run'], { cwd: dir, input: 'go\n' })
    expect(piped.code, piped.stderr).to.equal(0)
    expect(piped.stdout.match(/↳ tools\.list/g) ?? []).to.have.length(CALLS - 4)
    expect(piped.stdout).to.include(`${CALLS} nested call(s): ${CALLS - 4} ok, 4 failed`)
    const json = await faber(['run', '--json'], { cwd: dir, input: 'go\n' })
    expect(jsonLines(json.stdout).filter((e) => e.type === 'nested-end')).to.have.length(CALLS)
  })
})
