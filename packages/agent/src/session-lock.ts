// one process at a time writes a session log: two continuing the same session would both run the program it left
// waiting again. the lock is a unix socket bound under a name derived from the log's real path. on linux it lives in
// the abstract namespace, which the kernel frees when its holder dies, SIGKILL included; elsewhere it is a socket file
// in the temp dir, removed when a connection to it is refused (its holder is gone). the holder tells whoever connects
// its pid, for the message. processes on other hosts sharing the file (a network file system) are not seen.

import { createHash } from 'node:crypto'
import { realpath, unlink } from 'node:fs/promises'
import { createConnection, createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'

export interface SessionLock {
  release(): Promise<void>
}

async function addressOf(path: string) {
  let real = resolve(path)
  try {
    real = join(await realpath(dirname(path)), basename(path))
  } catch {}
  const name = `faber-session-${createHash('sha256').update(real).digest('hex').slice(0, 32)}`
  return process.platform === 'linux' ? `\0${name}` : join(tmpdir(), `${name}.sock`)
}

function listen(server: Server, address: string): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((done) => {
    server.once('error', done)
    server.listen(address, () => {
      server.off('error', done)
      done(undefined)
    })
  })
}

/** the holder's pid as it says it; `gone` when nobody listens there any more */
function holderOf(address: string): Promise<number | 'gone' | undefined> {
  return new Promise((done) => {
    let said = ''
    const socket = createConnection(address)
    socket.setEncoding('utf8')
    socket.on('data', (chunk) => (said += chunk))
    socket.on('end', () => done(Number.parseInt(said, 10) || undefined))
    socket.on('error', (error: NodeJS.ErrnoException) => done(error.code === 'ECONNREFUSED' || error.code === 'ENOENT' ? 'gone' : undefined))
    socket.setTimeout(2000, () => {
      socket.destroy()
      done(undefined)
    })
  })
}

/**
 * takes the log's lock, or resolves with who holds it (`pid` undefined when it did not say). a process may hold the
 * lock of any number of logs, each once
 */
export async function lockSessionLog(path: string): Promise<SessionLock | { heldBy: number | undefined }> {
  const address = await addressOf(path)
  for (let attempt = 0; ; attempt++) {
    const server = createServer((socket) => socket.end(`${process.pid}\n`))
    const failed = await listen(server, address)
    if (!failed) {
      // the lock never keeps the process up
      server.unref()
      return {
        release: () =>
          new Promise<void>((done) => {
            server.close(() => done())
          }),
      }
    }
    if (failed.code !== 'EADDRINUSE') throw failed
    const holder = await holderOf(address)
    // its holder is gone (on linux, just now; elsewhere it may have left its socket file): bound again, once
    if (holder === 'gone' && attempt === 0) {
      if (!address.startsWith('\0')) await unlink(address).catch(() => {})
      continue
    }
    return { heldBy: holder === 'gone' ? undefined : holder }
  }
}
