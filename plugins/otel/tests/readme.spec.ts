import { execFile } from 'node:child_process'
import { readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { promisify } from 'node:util'
import { expect } from 'chai'

const here = path.dirname(new URL(import.meta.url).pathname)

describe('otel README', () => {
  it('the example runs as written and prints the lines marked // →', async function () {
    this.timeout(30000)
    const readme = await readFile(path.join(here, '../README.md'), 'utf8')
    const block = readme.match(/```ts\n([\s\S]*?)```/)![1]
    const script = path.join(here, `../.readme-example-${process.pid}.ts`)
    await writeFile(script, block)
    try {
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx/esm', script], { cwd: path.join(here, '..'), timeout: 25000 })
      const expected = block
        .split('\n')
        .filter((line) => line.startsWith('// → '))
        .map((line) => line.slice('// → '.length))
      expect(expected).to.have.length(2)
      expect(stdout.trim().split('\n')).to.deep.equal(expected)
    } finally {
      await rm(script, { force: true })
    }
  })
})
