// @faber/store on each driver, in one run: approval grants written per second (one commit each, in sequence and from
// 8 writers at once), checked per second (the rules answerer's match against a warm cache, and a cold read of the
// table), a request's whole approval path with a warm cache (a tool call that a stored grant allows), and the
// revocation delay across two processes: from the revoking commit returning in this process to another process's
// check no longer allowing the call. checks, requests and revocations run against a table of STORE_TABLE (default 50)
// grants, a deployment's worth; then STORE_GRANTS (default 300) grants are written per row, and the whole table read
// cold. SQLite is the baseline each PostgreSQL figure is divided by. the PostgreSQL server is a throwaway cluster on
// this machine (127.0.0.1, fsync on), so a real database server's network latency comes on top.

import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { defineTool, t } from '@faber/core'
import { call, deployment } from '@faber/core/testing'
import Approval, { GrantStore, newGrant } from '@faber/plugin-approval'
import DeploymentStore, { openStore, type Store, type StoreLocation } from '@faber/store'
import { postgresCluster, postgresMissing } from '@faber/store/testing'
import { Logger } from 'cordis'
import { isMain, median, timeOp } from './harness.ts'

const TABLE = Number(process.env.STORE_TABLE ?? 50)
const GRANTS = Number(process.env.STORE_GRANTS ?? 300)
const REVOKES = Number(process.env.STORE_REVOKES ?? 20)
const CHILD = fileURLToPath(new URL('./_store-child.ts', import.meta.url))

interface Figures {
  writesPerSec: number
  concurrentWritesPerSec: number
  warmChecksPerSec: number
  coldReadMs: number
  requestUs: number
  revokeDelayMs?: { median: number; max: number }
}

const grant = (tool: string) => newGrant({ tool, scope: 'always' }, 'bench')

async function writes(store: Store, prefix: string, writers: number) {
  const grants = new GrantStore(store)
  await grants.list()
  const start = performance.now()
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      for (let i = w; i < GRANTS; i += writers) await grants.add(grant(`${prefix}-${i}`))
    }),
  )
  return GRANTS / ((performance.now() - start) / 1000)
}

function child(location: string) {
  const proc = spawn(process.execPath, ['--import', 'tsx/esm', CHILD, location], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines: string[] = []
  let waiting: (() => void) | undefined
  let buffer = ''
  proc.stdout.on('data', (chunk) => {
    buffer += chunk
    const parts = buffer.split('\n')
    buffer = parts.pop()!
    lines.push(...parts)
    waiting?.()
  })
  const next = async () => {
    while (!lines.length) await new Promise<void>((resolve) => (waiting = resolve))
    return lines.shift()!
  }
  return { proc, next }
}

/** a grant revoked here, timed until the other process's check stops allowing what it allowed */
async function revokeDelays(location: string, store: Store) {
  const other = child(location)
  const delays: number[] = []
  try {
    if ((await other.next()) !== 'ready') throw new Error('the other process did not start')
    const grants = new GrantStore(store)
    for (let i = 0; i < REVOKES; i++) {
      const tool = `revoke-${i}`
      const added = grant(tool)
      await grants.add(added)
      other.proc.stdin.write(`watch ${tool}\n`)
      if ((await other.next()) !== 'watching') throw new Error('the other process did not see the grant')
      await grants.remove(added.id)
      const committed = performance.timeOrigin + performance.now()
      const seen = await other.next()
      delays.push(Number(seen.slice(5)) - committed)
    }
  } finally {
    other.proc.stdin.end()
    other.proc.kill()
  }
  return { median: median(delays), max: Math.max(...delays) }
}

async function measure(driver: string, location: StoreLocation, revokeAt?: string): Promise<Figures> {
  const store = await openStore(location)
  try {
    await new GrantStore(store).import({ version: 1, grants: Array.from({ length: TABLE - 1 }, (_, i) => ({ tool: `other-${i}`, decision: 'allow' })) })
    // a deployment on the same store: the rules answerer matches against the grants it cached
    const ctx = await deployment({ mode: 'native' }, (ctx) => {
      ctx.plugin(DeploymentStore, location)
      ctx.plugin(Approval, { require: ['deploy'] })
    })
    ctx.tools.register(defineTool({ name: 'deploy', description: 'deploys', parameters: t.object({}), output: { schema: t.string() }, execute: () => 'ok' }))
    await (ctx.approval as Approval).grant({ tool: 'deploy', scope: 'always' })
    const approval = ctx.approval as Approval
    const warmUs = await timeOp(() => approval.match({ tool: 'deploy', arguments: {} }), 5000)
    const requestUs = await timeOp(async () => {
      if ((await call(ctx, 'deploy', {})).isError) throw new Error('the grant did not allow the call')
    }, 2000)
    await ctx.stop()
    const revokeDelayMs = revokeAt ? await revokeDelays(revokeAt, store) : undefined
    const writesPerSec = await writes(store, `${driver}-seq`, 1)
    const concurrentWritesPerSec = await writes(store, `${driver}-par`, 8)
    const coldReadMs = (await timeOp(() => new GrantStore(store).read(), 20)) / 1000
    return { writesPerSec, concurrentWritesPerSec, warmChecksPerSec: 1e6 / warmUs, coldReadMs, requestUs, revokeDelayMs }
  } finally {
    await store.close()
  }
}

export async function benchStore() {
  Logger.levels.base = 0
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-store-'))
  try {
    const file = join(dir, 'faber.db')
    const sqlite = await measure('sqlite', { path: file }, file)
    const missing = postgresMissing()
    let postgres: Figures | undefined
    if (missing) console.log(`  PostgreSQL rows skipped: ${missing}`)
    else {
      const url = await (await postgresCluster({ durable: true })).database()
      postgres = await measure('postgres', { url }, url)
    }
    const line = (label: string, a: string, b?: string, ratio?: number) =>
      console.log(`  ${label.padEnd(46)} ${a.padStart(14)} ${(b ?? '-').padStart(14)}${ratio === undefined ? '' : `   ${ratio.toFixed(2)}× SQLite`}`)
    const per = (n: number) => `${Math.round(n).toLocaleString('en-US')}/s`
    console.log(`  ${''.padEnd(46)} ${'SQLite'.padStart(14)} ${'PostgreSQL'.padStart(14)}`)
    line(
      'grants written, one after another',
      per(sqlite.writesPerSec),
      postgres && per(postgres.writesPerSec),
      postgres && postgres.writesPerSec / sqlite.writesPerSec,
    )
    line(
      'grants written, 8 writers at once',
      per(sqlite.concurrentWritesPerSec),
      postgres && per(postgres.concurrentWritesPerSec),
      postgres && postgres.concurrentWritesPerSec / sqlite.concurrentWritesPerSec,
    )
    line(
      `grants checked (warm cache, ${TABLE} grants)`,
      per(sqlite.warmChecksPerSec),
      postgres && per(postgres.warmChecksPerSec),
      postgres && postgres.warmChecksPerSec / sqlite.warmChecksPerSec,
    )
    line(
      `grants read cold (${TABLE + GRANTS * 2} rows)`,
      `${sqlite.coldReadMs.toFixed(2)} ms`,
      postgres && `${postgres.coldReadMs.toFixed(2)} ms`,
      postgres && postgres.coldReadMs / sqlite.coldReadMs,
    )
    line(
      'a request a stored grant allows (warm cache)',
      `${sqlite.requestUs.toFixed(1)} µs`,
      postgres && `${postgres.requestUs.toFixed(1)} µs`,
      postgres && postgres.requestUs / sqlite.requestUs,
    )
    const delay = (d?: { median: number; max: number }) => (d ? `${d.median.toFixed(2)} ms (max ${d.max.toFixed(1)})` : undefined)
    line(`revocation seen by another process (${REVOKES}×)`, delay(sqlite.revokeDelayMs)!, delay(postgres?.revokeDelayMs))
    return { sqlite, postgres }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

if (isMain(import.meta.url)) await benchStore()
