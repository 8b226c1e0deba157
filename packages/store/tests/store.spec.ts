import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ToolRuntime, { assertStarted, defineTool, t } from '@faber/core'
import { call } from '@faber/core/testing'
import DeploymentStore, { changeTrigger, type Migration, openStore, type Store, type StoreLocation, storeUrl } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { Context, Logger } from 'cordis'

const THINGS: Migration[] = [
  {
    sqlite: 'CREATE TABLE t_things (id TEXT PRIMARY KEY, n INTEGER NOT NULL) STRICT',
    postgres: 'CREATE TABLE t_things (id TEXT PRIMARY KEY, n INTEGER NOT NULL)',
  },
  { sqlite: '', postgres: changeTrigger('t_things') },
]

const until = async (check: () => boolean, ms = 2000) => {
  const deadline = Date.now() + ms
  while (!check() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 2))
  return check()
}

/** the same promises, asked of each driver */
function contract(driver: 'sqlite' | 'postgres', location: () => Promise<StoreLocation>) {
  describe(`@faber/store on ${driver}`, () => {
    const opened: Store[] = []
    const open = async () => {
      const store = await openStore(await location())
      opened.push(store)
      return store
    }
    afterEach(async () => {
      for (const store of opened.splice(0)) await store.close()
    })

    it('migrates an owner once, in order, and refuses a store a newer Faber wrote, naming the owner', async () => {
      const at = await location()
      const store = await openStore(at)
      opened.push(store)
      expect(store.driver).to.equal(driver)
      await store.migrate('things', THINGS)
      await store.migrate('things', THINGS)
      expect(await store.get('SELECT version FROM faber_schema WHERE owner = ?', ['things'])).to.deep.equal({ version: 2 })
      const error = await store.migrate('things', THINGS.slice(0, 1)).catch((error: Error) => error)
      expect(String(error)).to.match(/cannot be used: its things tables are at version 2, newer than this Faber knows \(1\); upgrade Faber/)
      // the store's own tables: a newer Faber's store is refused when opened, and the plugin's start fails loudly
      await store.run("UPDATE faber_schema SET version = 99 WHERE owner = 'faber-store'")
      const refused = await openStore(at).catch((error: Error) => error)
      expect(String(refused)).to.match(/its faber-store tables are at version 99, newer than this Faber knows \(1\); upgrade Faber/)
      const ctx = new Context()
      Logger.levels.base = 0
      ctx.plugin(ToolRuntime)
      ctx.plugin(DeploymentStore, at)
      await ctx.start()
      const failed = await assertStarted(ctx).catch((error: Error) => error)
      // the deployment's gate: no tool body runs while a plugin failed to start
      ctx.tools.register(defineTool({ name: 'echo', description: 'echoes', parameters: t.object({}), output: { schema: t.string() }, execute: () => 'ran' }))
      const refusedCall = await call(ctx, 'echo', {})
      await ctx.stop()
      expect(String(failed)).to.match(/plugin "store" failed to start: .*faber-store tables are at version 99/)
      expect(refusedCall.isError && refusedCall.error.code).to.equal('DEPLOYMENT_FAILED')
    })

    it('a transaction commits when its function resolves and leaves nothing when it throws', async () => {
      const store = await open()
      await store.migrate('things', THINGS)
      await store.transaction(async (tx) => {
        await tx.run('INSERT INTO t_things (id, n) VALUES (?, ?)', ['a', 1])
      })
      const error = await store
        .transaction(async (tx) => {
          await tx.run('INSERT INTO t_things (id, n) VALUES (?, ?)', ['b', 2])
          throw new Error('changed my mind')
        })
        .catch((error: Error) => error)
      expect(String(error)).to.contain('changed my mind')
      expect(await store.all('SELECT id FROM t_things ORDER BY id')).to.deep.equal([{ id: 'a' }])
    })

    it('an exclusive section is one at a time across connections: 40 read-then-write increments at once, none lost', async () => {
      const [a, b] = [await open(), await open()]
      await a.migrate('things', THINGS)
      await a.run('INSERT INTO t_things (id, n) VALUES (?, ?)', ['count', 0])
      const bump = (store: Store) =>
        store.exclusive('count', async (tx) => {
          const row = await tx.get<{ n: number }>('SELECT n FROM t_things WHERE id = ?', ['count'])
          // SQLite: a section awaits only the store (another connection of this process waiting for the lock blocks
          // the event loop); PostgreSQL: a section may await anything, and others wait without blocking
          if (driver === 'postgres') await new Promise((resolve) => setTimeout(resolve, 1))
          await tx.run('UPDATE t_things SET n = ? WHERE id = ?', [row!.n + 1, 'count'])
        })
      await Promise.all(Array.from({ length: 40 }, (_, i) => bump(i % 2 ? a : b)))
      expect(await a.get('SELECT n FROM t_things WHERE id = ?', ['count'])).to.deep.equal({ n: 40 })
    })

    it("a reader's change mark moves when another connection writes the table", async () => {
      const [reader, writer] = [await open(), await open()]
      await writer.migrate('things', THINGS)
      const before = reader.changeMark('t_things')
      expect(before).to.be.a('number')
      await writer.run('INSERT INTO t_things (id, n) VALUES (?, ?)', ['x', 1])
      expect(await until(() => reader.changeMark('t_things') !== before), 'the mark moved').to.equal(true)
    })
  })
}

describe('@faber/store', () => {
  let dir: string
  before(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-store-'))))
  after(() => rm(dir, { recursive: true, force: true }))
  // each case opens its connections on one file, made fresh per case
  let files = 0
  let file: string | undefined
  beforeEach(() => (file = undefined))
  contract('sqlite', async () => ({ path: (file ??= join(dir, `s${++files}.db`)) }))

  describe('on PostgreSQL', () => {
    let database: () => Promise<string>
    before(async function () {
      this.timeout(60_000)
      const cluster = await requirePostgres(this)
      database = () => cluster.database()
    })
    // each case opens its connections on one database, made fresh per case
    let url: Promise<string> | undefined
    beforeEach(() => (url = undefined))
    contract('postgres', async () => ({ url: await (url ??= database()) }))
  })

  it('takes one of path, url or urlEnv, and says what to write otherwise', () => {
    expect(() => storeUrl({})).to.throw(/give one of path \(a SQLite file\), url \(postgres:\/\/…\) or urlEnv/)
    expect(() => storeUrl({ path: 'a.db', url: 'postgres://x' })).to.throw(/, not path and url/)
    expect(() => storeUrl({ urlEnv: 'FABER_TEST_NO_SUCH' }, {})).to.throw(/urlEnv names FABER_TEST_NO_SUCH, which is not set/)
    expect(() => storeUrl({ url: 'mysql://x' })).to.throw(/url must be a postgres:\/\/ URL/)
    expect(storeUrl({ urlEnv: 'U' }, { U: 'postgres://h/db' })).to.equal('postgres://h/db')
    expect(storeUrl({ path: 'a.db' })).to.equal(undefined)
  })
})
