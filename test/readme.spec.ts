// the root README's first screen tells the truth: its fresh-machine commands are the ones CI runs, and the demo
// excerpt it shows is what `pnpm demo` prints (timings aside), line for line and in order.

import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

const ROOT = fileURLToPath(new URL('../', import.meta.url))

// timings differ from run to run
const normalize = (line: string) => line.replace(/\d+(\.\d+)? (ms|s)\b/g, 'N $2').trimEnd()

describe('README.md', function () {
  this.timeout(60_000)

  it('keeps the two fresh-machine commands, and CI runs the same bootstrap and test', async () => {
    const readme = await readFile(`${ROOT}README.md`, 'utf8')
    const block = /## On a fresh machine[^\n]*\n\n```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? ''
    expect(block.split('\n').map((l) => l.split('#')[0].trim())).to.include.members([
      'bash scripts/bootstrap && pnpm demo',
      'bash scripts/bootstrap && pnpm test',
    ])
    const ci = await readFile(`${ROOT}.ci/run`, 'utf8')
    expect(ci).to.include('scripts/bootstrap').and.include('pnpm test')
  })

  it('opens with the demo excerpt that pnpm demo prints', async () => {
    const readme = await readFile(`${ROOT}README.md`, 'utf8')
    const excerpt = /```text\n([\s\S]*?)```/.exec(readme.slice(0, readme.indexOf('## On a fresh machine')))?.[1]
    expect(excerpt, 'a ```text excerpt before the fresh-machine section').to.be.a('string')
    const demo = await new Promise<string>((resolve, reject) =>
      execFile('pnpm', ['demo'], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' } }, (error, stdout) => (error ? reject(error) : resolve(stdout))),
    )
    const printed = demo.split('\n').map(normalize)
    let at = 0
    for (const line of excerpt!.split('\n').filter((l) => l.trim())) {
      const found = printed.indexOf(normalize(line), at)
      expect(found, `"${line}" (in this order) in:\n${demo}`).to.be.greaterThan(-1)
      at = found + 1
    }
  })
})
