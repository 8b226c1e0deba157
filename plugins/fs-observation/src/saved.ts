// observations kept in the deployment's store (table `fs_observations`), keyed by the session that made them, so a
// resumed session (the same session-log id) gets back what its agent had read. writes are queued and committed
// together on the next turn of the event loop: a lost observation only means one more read, never a stale write.

import type { Store } from '@faber/store'

const MIGRATIONS = [
  `CREATE TABLE fs_observations (
    session TEXT NOT NULL,
    agent TEXT NOT NULL,
    root TEXT NOT NULL,
    path TEXT NOT NULL,
    version TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (session, agent, root, path)
  ) STRICT, WITHOUT ROWID`,
]

export interface SavedObservation {
  root: string
  path: string
  version: string
}

export class SavedObservations {
  private queue: (string | number)[][] = []
  private scheduled = false
  private readonly load
  private readonly save

  constructor(
    readonly store: Store,
    /** told when a commit fails (another process held the store past its busy timeout, a full disk, ...) */
    private onerror: (error: unknown, lost: number) => void = () => {},
  ) {
    store.migrate('fs-observation', MIGRATIONS)
    this.load = store.db.prepare('SELECT root, path, version FROM fs_observations WHERE session = ? AND agent = ?')
    this.save = store.db.prepare('INSERT OR REPLACE INTO fs_observations (session, agent, root, path, version, at) VALUES (?, ?, ?, ?, ?, ?)')
  }

  /** what `agent` (its name; '' for none) observed in session `session` */
  read(session: string, agent: string): SavedObservation[] {
    return this.store.open ? (this.load.all(session, agent) as SavedObservation[]) : []
  }

  write(session: string, agent: string, root: string, path: string, version: string) {
    this.queue.push([session, agent, root, path, version, Date.now()])
    if (this.scheduled) return
    this.scheduled = true
    setImmediate(() => this.flush())
  }

  /** a command ran: nothing saved so far vouches for a file any more, in any session (they share the file system) */
  forgetAll() {
    this.queue = []
    if (this.store.open) this.store.db.prepare('DELETE FROM fs_observations').run()
  }

  /**
   * commits what is queued in one transaction. it runs from setImmediate, where a throw would end the process: a
   * commit that fails is reported and its observations are not kept, which costs a resumed session one more read
   */
  flush() {
    this.scheduled = false
    const rows = this.queue.splice(0)
    if (!rows.length || !this.store.open) return
    try {
      this.store.transaction(() => {
        for (const row of rows) this.save.run(...row)
      })
    } catch (error) {
      this.onerror(error, rows.length)
    }
  }
}
