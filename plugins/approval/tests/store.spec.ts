import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { GrantStore } from '@faber/plugin-approval'
import { openStore, SqliteStore, type Store } from '@faber/store'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'

const CHILD = fileURLToPath(new URL('./grant-child.ts', import.meta.url))

interface Granter {
  proc: ChildProcessWithoutNullStreams
  acked: string[]
  ready: Promise<void>
  exited: Promise<number | null>
  stderr: () => string
}

function granter(store: string, prefix: string, count: number | 'forever', onAck?: (acked: string[]) => void): Granter {
  const proc = spawn(process.execPath, ['--import', 'tsx/esm', CHILD, store, prefix, String(count)], { stdio: ['pipe', 'pipe', 'pipe'] })
  const acked: string[] = []
  let stderr = ''
  let buffer = ''
  let markReady!: () => void
  let notReady!: (error: Error) => void
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve
    notReady = reject
  })
  // a child that fails to start is the test's failure, with what it said, not a wait until the timeout
  ready.catch(() => {})
  proc.stderr.on('data', (chunk) => (stderr += chunk))
  proc.stdout.on('data', (chunk) => {
    buffer += chunk
    const lines = buffer.split('\n')
    buffer = lines.pop()!
    for (const line of lines) {
      if (line === 'ready') markReady()
      else if (line.startsWith('ack ')) acked.push(line.slice(4))
    }
    onAck?.(acked)
  })
  const exited = new Promise<number | null>((resolve) =>
    proc.on('close', (code) => {
      notReady(new Error(`the granter exited ${code} before it was ready: ${stderr}`))
      resolve(code)
    }),
  )
  return { proc, acked, ready, exited, stderr: () => stderr }
}

describe('approval: grants in a store shared by processes', function () {
  // every acknowledged grant is a synchronous=FULL commit (an fsync); CI machines' disks have been measured at up to
  // ~100 ms per fsync under load, so the bound is generous — the test is about losing nothing, not about speed
  this.timeout(240_000)
  let dir: string
  const children: Granter[] = []
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'faber-store-'))))
  afterEach(async () => {
    for (const child of children.splice(0)) {
      child.proc.kill('SIGKILL')
      await child.exited
    }
    await rm(dir, { recursive: true, force: true })
  })

  /** two processes record 300 grants each at once into `location`; every one they acknowledged must be kept */
  async function race(location: string, open: () => Promise<Store>) {
    const a = granter(location, 'a', 300)
    const b = granter(location, 'b', 300)
    children.push(a, b)
    await Promise.all([a.ready, b.ready])
    a.proc.stdin.write('go\n')
    b.proc.stdin.write('go\n')
    const codes = await Promise.all([a.exited, b.exited])
    expect(codes, a.stderr() + b.stderr()).to.deep.equal([0, 0])
    expect(a.acked).to.have.length(300)
    expect(b.acked).to.have.length(300)
    const store = await open()
    try {
      const kept = new Set((await new GrantStore(store).list()).map((g) => g.id))
      expect(kept.size).to.equal(600)
      const lost = [...a.acked, ...b.acked].filter((id) => !kept.has(id))
      expect(lost).to.deep.equal([])
    } finally {
      await store.close()
    }
  }

  it('two processes × 300 grants at the same time: every acknowledged grant is kept', async () => {
    const path = join(dir, 'faber.db')
    await race(path, async () => new SqliteStore(path))
  })

  it('on PostgreSQL too: two processes × 300 grants at the same time, every acknowledged grant kept', async function () {
    const cluster = await requirePostgres(this)
    const url = await cluster.database()
    await race(url, () => openStore({ url }))
  })

  it('a store left by a process killed mid-write opens cleanly and keeps every acknowledged grant', async () => {
    const path = join(dir, 'faber.db')
    let killed = false
    const child = granter(path, 'k', 'forever', (acked) => {
      if (acked.length >= 40 && !killed) {
        killed = true
        child.proc.kill('SIGKILL')
      }
    })
    children.push(child)
    await child.ready
    child.proc.stdin.write('go\n')
    await child.exited
    expect(killed).to.equal(true)
    // the killed writer's write-ahead log is still there: opening must replay or discard it
    expect(existsSync(`${path}-wal`)).to.equal(true)
    const store = new SqliteStore(path)
    try {
      expect(store.db.pragma('integrity_check', { simple: true })).to.equal('ok')
      const kept = new Set((await new GrantStore(store).list()).map((g) => g.id))
      expect(child.acked.filter((id) => !kept.has(id))).to.deep.equal([])
      // and it takes new writes
      await new GrantStore(store).import({ version: 1, grants: [{ id: 'after', tool: 'x', decision: 'allow' }] })
      expect((await new GrantStore(store).list()).some((g) => g.id === 'after')).to.equal(true)
    } finally {
      await store.close()
    }
  })
})
