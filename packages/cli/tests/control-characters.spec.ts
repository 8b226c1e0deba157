// what a program prints, and what a model says, reach the person at the terminal through the transcript: a control
// character there would be obeyed by the terminal (clear the screen, retitle it, move the cursor over what was shown).
// the transcript shows them instead of sending them

import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect } from 'chai'
import { faber } from './helpers.ts'

// the escapes are made at run time: the program's text itself is plain
const PROGRAM = String.raw`console.log("\x1b[2J\x1b[Hcleared")
console.log("\x1b]0;retitled\x07done\r     ")
throw new Error("\x1b[31mred\x9b2J")`

const DEPLOYMENT = `mode: code
plugins:
  '@faber/sandbox': {}
model:
  provider: scripted
  script:
    - toolCalls: [{ name: run_code, arguments: { code: ${JSON.stringify(PROGRAM)}, description: prints escapes } }]
    - text: ${JSON.stringify('all \x1b[2Jdone')}
`

describe('faber: control characters from programs and models', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-control-'))
    await writeFile(join(dir, 'faber.yml'), DEPLOYMENT)
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  it('are shown in the transcript, not sent to the terminal', async () => {
    const ran = await faber(['run', join(dir, 'faber.yml')], { input: 'go\n' })
    expect(ran.code, ran.stderr).to.equal(0)
    // piped: no color either, so no escape at all may reach stdout
    for (const control of ['\x1b', '\x07', '\x9b', '\r']) expect(ran.stdout).not.to.include(control)
    expect(ran.stdout).to.include('\\x1b[2J\\x1b[Hcleared').and.include('\\x1b]0;retitled\\x07done\\x0d')
    expect(ran.stdout).to.include('\\x1b[31mred\\x9b2J')
    expect(ran.stdout).to.include('all \\x1b[2Jdone')
  })
})
