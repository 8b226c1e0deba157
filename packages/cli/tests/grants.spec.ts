import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GrantStore } from '@faber/plugin-approval'
import { openStore, SqliteStore, type Store } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import { faber } from './helpers.ts'

describe('faber grants', function () {
  this.timeout(60_000)
  let dir: string
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-grants-cli-'))))
  afterEach(() => rm(dir, { recursive: true, force: true }))

  /** the whole round on one store: `store` is what --store gets, `open` opens it as the approval plugin would */
  async function round(store: string, open: () => Promise<Store>) {
    const input = join(dir, 'grants.json')
    await writeFile(
      input,
      JSON.stringify({
        version: 1,
        grants: [
          { id: 'src-writes', tool: 'write', arguments: { '$.path': '^src/' }, decision: 'allow' },
          { id: 'no-deploy', tool: 'deploy', agent: 'ci', decision: 'reject' },
        ],
      }),
    )
    const imported = await faber(['grants', 'import', input, '--store', store])
    expect(imported.stderr).to.equal('')
    expect(imported.code).to.equal(0)
    expect(imported.stdout).to.include('imported 2 grants into')

    const listed = await faber(['grants', 'list', '--store', store])
    expect(listed.code).to.equal(0)
    const lines = listed.stdout.trim().split('\n')
    expect(lines[0]).to.match(/^ID\s+DECISION\s+TOOL\s+AGENT\s+ARGUMENTS\s+BY\s+CREATED$/)
    expect(lines[1]).to.match(/^src-writes\s+allow\s+write\s+\*\s+\$\.path~\^src\//)
    expect(lines[2]).to.match(/^no-deploy\s+reject\s+deploy\s+ci\s+-/)

    const revoked = await faber(['grants', 'revoke', 'no-deploy', 'nope', '--store', store])
    expect(revoked.code).to.equal(1)
    expect(revoked.stdout).to.equal('revoked no-deploy\n')
    expect(revoked.stderr).to.include('no grant with id "nope"')

    const exported = join(dir, 'out.json')
    expect((await faber(['grants', 'export', '--store', store, '--output', exported])).code).to.equal(0)
    const data = JSON.parse(await readFile(exported, 'utf8'))
    expect(data.version).to.equal(1)
    expect(data.grants.map((g: { id: string }) => g.id)).to.deep.equal(['src-writes'])

    // what the command wrote is what the approval plugin reads
    const opened = await open()
    try {
      expect((await new GrantStore(opened).list()).map((g) => [g.id, g.tool, g.arguments])).to.deep.equal([['src-writes', 'write', { '$.path': '^src/' }]])
    } finally {
      await opened.close()
    }
  }

  it('imports, lists, revokes and exports the grants of a store', async () => {
    const store = join(dir, 'state', 'faber.db')
    await round(store, async () => new SqliteStore(store))
  })

  it('does the same on PostgreSQL, named by URL or by a deployment file whose store is urlEnv', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    await round(url, () => openStore({ url }))
    await writeFile(join(dir, 'deploy.yml'), "plugins:\n  '@faber/store': { urlEnv: FABER_TEST_STORE_URL }\n")
    const listed = await faber(['grants', 'list', '-d', join(dir, 'deploy.yml'), '--json'], { env: { FABER_TEST_STORE_URL: url } })
    expect(listed.stderr).to.equal('')
    expect(JSON.parse(listed.stdout).grants.map((g: { id: string }) => g.id)).to.deep.equal(['src-writes'])
    const unset = await faber(['grants', 'list', '-d', join(dir, 'deploy.yml')], { env: { FABER_TEST_STORE_URL: undefined } })
    expect(unset.code).to.not.equal(0)
    expect(unset.stderr).to.include('urlEnv names FABER_TEST_STORE_URL, which is not set')
  })

  it('lists a row another writer left that is not a grant, so it can be revoked', async () => {
    const store = join(dir, 'faber.db')
    const opened = new SqliteStore(store)
    try {
      await new GrantStore(opened).import({ version: 1, grants: [{ id: 'fine', tool: 'read', decision: 'allow' }] })
      opened.db.prepare("INSERT INTO approval_grants (id, tool, arguments, decision, created_at) VALUES ('garbled', 'deploy', '{x', 'reject', 'now')").run()
    } finally {
      await opened.close()
    }
    const listed = await faber(['grants', 'list', '--store', store])
    expect(listed.code, listed.stderr).to.equal(0)
    const lines = listed.stdout.trim().split('\n')
    expect(lines[1]).to.match(/^fine\s+allow\s+read\s/)
    expect(lines[2]).to.match(/^garbled\s+reject\s+deploy\s+\?\s+UNREADABLE: /)
    const revoked = await faber(['grants', 'revoke', 'garbled', '--store', store])
    expect(revoked.stdout).to.equal('revoked garbled\n')
    expect((await faber(['grants', 'list', '--store', store])).stdout).to.not.contain('garbled')
  })

  it("finds the store through a deployment file's @faber/store plugin", async () => {
    await writeFile(join(dir, 'deploy.yml'), `plugins:\n  '@faber/store': { path: '\${dir}/faber.db' }\n  '@faber/plugin-approval': {}\n`)
    const imported = await faber(['grants', 'import', '-', '-d', join(dir, 'deploy.yml')], {
      input: '{ "version": 1, "grants": [{ "tool": "read*", "decision": "allow" }] }',
    })
    expect(imported.code, imported.stderr).to.equal(0)
    const listed = await faber(['grants', 'list', '--json', '-d', join(dir, 'deploy.yml')])
    expect(JSON.parse(listed.stdout).grants.map((g: { tool: string }) => g.tool)).to.deep.equal(['read*'])
  })

  it('exits 2 with what is wrong: no store named, a bad import', async () => {
    const none = await faber(['grants', 'list'])
    expect(none.code).to.equal(2)
    expect(none.stderr).to.include('pass --store FILE|URL or --deployment FILE')
    const store = join(dir, 'faber.db')
    await writeFile(join(dir, 'bad.json'), '{ "version": 1, "grants": [{ "tool": "x", "decision": "maybe" }] }')
    const bad = await faber(['grants', 'import', join(dir, 'bad.json'), '--store', store])
    expect(bad.code).to.equal(2)
    expect(bad.stderr).to.include('grants[0].decision must be "allow" or "reject"; nothing was imported')
  })
})
