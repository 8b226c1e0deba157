// the throwaway PostgreSQL cluster of @faber/store/testing is removed however its process ends: a test run killed by a
// CI timeout, a SIGKILL or Ctrl-C runs no exit handler, and must not leave a server running behind it

import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { requirePostgres } from '@faber/store/testing'
import { expect } from 'chai'

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => resolve(true)).once('error', () => resolve(false))
    socket.once('connect', () => socket.destroy())
  })

describe('the test cluster of a killed process', function () {
  this.timeout(60_000)

  for (const signal of ['SIGKILL', 'SIGINT'] as const) {
    it(`is stopped and removed when its process dies of ${signal}`, async function () {
      await requirePostgres(this)
      const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures/cluster-holder.ts')], {
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      const where = await new Promise<{ port: number; dir: string }>((resolve, reject) => {
        let out = ''
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString()
          if (out.includes('\n')) resolve(JSON.parse(out))
        })
        child.once('exit', (code) => reject(new Error(`the holder exited with ${code} before its cluster started`)))
      })
      expect(await listening(where.port)).to.equal(true)
      child.kill(signal)
      for (const until = Date.now() + 20_000; (existsSync(where.dir) || (await listening(where.port))) && Date.now() < until; )
        await new Promise((resolve) => setTimeout(resolve, 100))
      expect({ dir: existsSync(where.dir), listening: await listening(where.port) }).to.deep.equal({ dir: false, listening: false })
    })
  }
})
