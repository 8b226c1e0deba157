// a throwaway PostgreSQL cluster for tests and benches: initdb in a temporary directory, a free port on 127.0.0.1,
// trust authentication for the user `faber`, removed when the process ends (also when it is killed). initdb and postgres refuse to run as
// root, so as root they run as the `postgres` system user (the directory is given to it). one cluster per process.

import { execFile, execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'

const run = promisify(execFile)

export interface Cluster {
  readonly port: number
  readonly dir: string
  /** the URL of a new, empty database on it */
  database(): Promise<string>
  /** runs SQL as the superuser on the database `postgres` */
  admin(sql: string): Promise<pg.QueryResult>
  /** stops the server (fast shutdown: connections are ended) */
  stop(): Promise<void>
  start(): Promise<void>
}

/** the directory holding initdb and pg_ctl: FABER_POSTGRES_BIN, else the newest /usr/lib/postgresql/<n>/bin */
export function postgresBin(): string | undefined {
  if (process.env.FABER_POSTGRES_BIN) return process.env.FABER_POSTGRES_BIN
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root)
    .filter((name) => existsSync(join(root, name, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a))
  return versions.length ? join(root, versions[0], 'bin') : undefined
}

/** why no cluster can be started here, or undefined when one can */
export function postgresMissing(): string | undefined {
  const bin = postgresBin()
  if (!bin) return 'PostgreSQL is not installed (no /usr/lib/postgresql/<n>/bin/initdb; apt-get install postgresql, or set FABER_POSTGRES_BIN)'
  if (userInfo().uid === 0) {
    try {
      execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' })
    } catch {
      return 'running as root without a `postgres` system user to run the server as'
    }
  }
}

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

let shared: Promise<Cluster> | undefined

/**
 * the process's cluster, started on first use (a few seconds) and removed when the process exits. tests run it with
 * fsync off (nothing in it outlives the run); `durable` (the first call decides) keeps PostgreSQL's default, for
 * benches whose commits should cost what they cost on a real server
 */
export function postgresCluster(options: { durable?: boolean } = {}): Promise<Cluster> {
  const missing = postgresMissing()
  if (missing) return Promise.reject(new Error(`no PostgreSQL cluster can be started here: ${missing}`))
  shared ??= startCluster(options.durable === true)
  return shared
}

/**
 * for a `before` hook of a suite that needs PostgreSQL: the process's cluster. where none can be started the suite
 * is skipped (mocha reports it as pending, never as passed) with the reason printed; with FABER_REQUIRE_POSTGRES=1
 * (set by .ci/run) that is an error
 */
export async function requirePostgres(context: { skip(): void }): Promise<Cluster> {
  const missing = postgresMissing()
  if (missing && process.env.FABER_REQUIRE_POSTGRES === '1') throw new Error(`PostgreSQL is required here (FABER_REQUIRE_POSTGRES=1) but ${missing}`)
  if (missing) {
    console.warn(`      PostgreSQL cannot run here, so these tests are SKIPPED (not passed): ${missing}`)
    context.skip()
  }
  return postgresCluster()
}

async function startCluster(durable: boolean): Promise<Cluster> {
  const bin = postgresBin()!
  const root = userInfo().uid === 0
  const dir = mkdtempSync(join(tmpdir(), 'faber-pg-'))
  if (root) {
    const ids = execFileSync('id', ['postgres']).toString()
    chownSync(dir, Number(/uid=(\d+)/.exec(ids)![1]), Number(/gid=(\d+)/.exec(ids)![1]))
  }
  const as = (program: string, args: string[]) =>
    (root ? ['runuser', ['-u', 'postgres', '--', join(bin, program), ...args]] : [join(bin, program), args]) as [string, string[]]
  const data = join(dir, 'data')
  const port = await freePort()
  await run(...as('initdb', ['-D', data, '-A', 'trust', '-U', 'faber', '--no-sync', '-E', 'UTF8']))
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=60${durable ? '' : ' -c fsync=off'}`
  const pgctl = (...args: string[]) => run(...as('pg_ctl', ['-D', data, ...args]))
  const start = async () => void (await pgctl('-o', options, '-l', join(dir, 'log'), '-w', 'start'))
  const stop = async () => void (await pgctl('-m', 'fast', '-w', 'stop'))
  await start()
  const [program, args] = as('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])
  process.once('exit', () => {
    try {
      execFileSync(program, args, { stdio: 'ignore' })
    } catch {}
    rmSync(dir, { recursive: true, force: true })
  })
  // a process killed (SIGKILL, a CI timeout, Ctrl-C) runs no exit handler: a watcher holding a pipe from this process
  // sees it close when this process is gone, however it went, and removes the cluster then
  const watcher = spawn('sh', ['-c', 'cat >/dev/null; "$@" >/dev/null 2>&1; rm -rf "$0"', dir, program, ...args], {
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
  })
  watcher.unref()
  ;(watcher.stdin as unknown as Socket).unref()
  let databases = 0
  const admin = async (sql: string) => {
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'faber', database: 'postgres' })
    await client.connect()
    try {
      return await client.query(sql)
    } finally {
      await client.end()
    }
  }
  return {
    port,
    dir,
    admin,
    stop,
    start,
    async database() {
      const name = `faber_${process.pid}_${++databases}`
      await admin(`CREATE DATABASE ${name}`)
      return `postgres://faber@127.0.0.1:${port}/${name}`
    },
  }
}
