// a file's version is the SHA-256 of its bytes. a content hash, not mtime/size/inode: two different contents
// never share a version (mtime has coarse granularity and can be set back; a same-size rewrite within one tick
// is invisible to stat), and rewriting identical bytes keeps the version, which is right: nothing was lost.

import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { errnoOf } from './errors.ts'

/** the expectation "this path must not exist": a write with it only creates */
export const ABSENT = 'absent'

export function versionOf(bytes: Uint8Array | string): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`
}

/** the current version of a file, or ABSENT when nothing is there */
export async function currentVersion(real: string): Promise<string> {
  try {
    return versionOf(await readFile(real))
  } catch (error) {
    if (errnoOf(error) === 'ENOENT') return ABSENT
    throw error
  }
}
