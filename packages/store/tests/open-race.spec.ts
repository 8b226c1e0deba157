import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { expect } from 'chai'

const CHILD = fileURLToPath(new URL('./fixtures/open-at.ts', import.meta.url))
const run = promisify(execFile)

describe('SqliteStore: two processes opening a new store at once', function () {
  this.timeout(120_000)

  // the second switch of a new file to WAL answered SQLITE_BUSY without waiting: 4 pairs in 30 failed "database is
  // locked" before the open tried again within its busy timeout
  it('both open it, pair after pair', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'faber-open-race-'))
    try {
      const outcomes: string[] = []
      for (let pair = 0; pair < 15; pair++) {
        const path = join(dir, `${pair}.db`)
        // both processes spin until the same moment, well after node and tsx have started
        const at = String(Date.now() + 1500)
        const opened = await Promise.all([0, 1].map(() => run(process.execPath, ['--import', 'tsx/esm', CHILD, path, at])))
        outcomes.push(...opened.map(({ stdout }) => stdout.trim()))
      }
      expect(outcomes.filter((outcome) => outcome !== 'ok')).to.deep.equal([])
      expect(outcomes).to.have.length(30)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
