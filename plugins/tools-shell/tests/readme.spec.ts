import { execFile } from 'node:child_process'
import { readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { promisify } from 'node:util'
import { expect } from 'chai'
import { cleanup, requireBubblewrap, tempDir } from './helpers.ts'

const here = path.dirname(new URL(import.meta.url).pathname)

afterEach(cleanup)

describe('tools-shell README', () => {
  it('the example runs as written and prints what its comments say', async function () {
    requireBubblewrap(this)
    this.timeout(30000)
    const readme = await readFile(path.join(here, '../README.md'), 'utf8')
    const block = readme.match(/```ts\n([\s\S]*?)```/)![1]
    const root = await tempDir()
    // the only change: a real directory for the placeholder root
    const script = path.join(here, `../.readme-example-${process.pid}.ts`)
    await writeFile(script, block.replaceAll('/path/to/workspace', root))
    try {
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx/esm', script], { cwd: path.join(here, '..'), timeout: 20000 })
      const expected = block
        .split('\n')
        .filter((line) => line.startsWith('// '))
        .map((line) => line.slice(3).replaceAll('/path/to/workspace', root))
      const normalize = (line: string) => line.replace(/\(\d+\.\d s\)/, '(N s)').replace(/; processes .*$/, '; processes …')
      expect(stdout.trim().split('\n').map(normalize)).to.deep.equal(expected.map(normalize))
      expect(await readFile(path.join(root, 'hello.txt'), 'utf8')).to.equal('hello\n')
    } finally {
      await rm(script, { force: true })
    }
  })
})
