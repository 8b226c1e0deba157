import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Logger } from 'cordis'

Logger.levels.base = 0

export async function tempDir(prefix = 'faber-agent-') {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) }
}

/** lets pending promise callbacks run */
export const tick = () => new Promise((resolve) => setImmediate(resolve))
