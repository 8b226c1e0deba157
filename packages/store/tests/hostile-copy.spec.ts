// faber replay's copy of a PostgreSQL store, read while another session holds one of its tables locked (a migration
// under way, a VACUUM FULL, an operator's LOCK TABLE): the read fails after statementTimeout, saying why, instead of
// holding the replay forever

import { PostgresCopy } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'
import pg from 'pg'

describe('PostgresCopy: a table held locked by another session', function () {
  this.timeout(30_000)

  it('a read past statementTimeout fails naming the lock as the likely cause, and the copy reads again once it is gone', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    const holder = new pg.Client({ connectionString: url })
    await holder.connect()
    const copy = new PostgresCopy(url, { statementTimeout: 300 })
    try {
      await holder.query('CREATE TABLE held (id INTEGER)')
      await holder.query('INSERT INTO held VALUES (1)')
      await holder.query('BEGIN')
      await holder.query('LOCK TABLE held IN ACCESS EXCLUSIVE MODE')
      const started = performance.now()
      const error = await copy.read('SELECT * FROM held').catch((caught) => caught)
      expect(error?.name).to.equal('StoreError')
      expect(error.message).to.match(
        /canceling statement due to statement timeout \(a read ran past statementTimeout: is a table held locked by another session\?\)/,
      )
      expect(performance.now() - started).to.be.below(5000)
      await holder.query('COMMIT')
      expect(await copy.read('SELECT * FROM held')).to.deep.equal([{ id: 1 }])
    } finally {
      await copy.close()
      await holder.end()
    }
  })
})
