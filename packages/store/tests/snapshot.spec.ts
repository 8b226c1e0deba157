import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SqliteStore } from '@faber/store'
import { expect } from 'chai'

async function files(dir: string) {
  const names = (await readdir(dir)).sort()
  return Promise.all(
    names.map(async (name) => ({ name, bytes: (await readFile(join(dir, name))).toString('base64'), mtime: (await stat(join(dir, name))).mtimeMs })),
  )
}

describe('SqliteStore.snapshot', () => {
  let dir: string
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-snapshot-'))
  })
  afterEach(() => rm(dir, { recursive: true, force: true }))

  async function seed(path: string) {
    const store = new SqliteStore(path)
    await store.migrate('test', ['CREATE TABLE things (name TEXT PRIMARY KEY) STRICT'])
    await store.run('INSERT INTO things VALUES (?)', ['kept'])
    return store
  }

  it('holds what the file held, takes writes in memory, and leaves the file as it was', async () => {
    const path = join(dir, 'faber.db')
    await (await seed(path)).close()
    const before = await files(dir)
    const copy = SqliteStore.snapshot(path)
    await copy.migrate('test', ['CREATE TABLE things (name TEXT PRIMARY KEY) STRICT'])
    await copy.transaction((tx) => tx.run('INSERT INTO things VALUES (?)', ['only in memory']))
    expect(copy.db.prepare('SELECT name FROM things ORDER BY name').pluck().all()).to.deep.equal(['kept', 'only in memory'])
    await copy.close()
    expect(await files(dir)).to.deep.equal(before)
    const again = new SqliteStore(path)
    expect(again.db.prepare('SELECT name FROM things').pluck().all()).to.deep.equal(['kept'])
    await again.close()
  })

  it('reads what another connection committed to its write-ahead log, creating no file', async () => {
    const path = join(dir, 'faber.db')
    const live = await seed(path)
    live.db.prepare('INSERT INTO things VALUES (?)').run('in the log')
    const before = (await readdir(dir)).sort()
    const copy = SqliteStore.snapshot(path)
    expect(copy.db.prepare('SELECT name FROM things ORDER BY name').pluck().all()).to.deep.equal(['in the log', 'kept'])
    copy.db.prepare('INSERT INTO things VALUES (?)').run('only in memory')
    expect(live.db.prepare('SELECT count(*) FROM things').pluck().get()).to.equal(2)
    expect((await readdir(dir)).sort()).to.deep.equal(before)
    await copy.close()
    await live.close()
  })

  it('gives an empty store for a file that does not exist, and creates none', async () => {
    const copy = SqliteStore.snapshot(join(dir, 'none', 'faber.db'))
    await copy.migrate('test', ['CREATE TABLE things (name TEXT PRIMARY KEY) STRICT'])
    expect(copy.db.prepare('SELECT count(*) FROM things').pluck().get()).to.equal(0)
    await copy.close()
    expect(await readdir(dir)).to.deep.equal([])
  })
})
