// atomic, optionally conditional writes: the new bytes go to a temp file in the target's directory, the
// expectation is checked as late as possible, then the temp file replaces the target in one rename.
//
// the window: for "must be at version V" the check (read + hash) and the rename are two system calls, so a
// change landing between them is lost; there is no portable compare-and-rename. the check runs after the temp
// file is complete, immediately before rename, so the window is microseconds, not the length of the write.
// for "must not exist" there is no window: link(2) refuses an existing target atomically.

import { randomBytes } from 'node:crypto'
import { chmod, link, mkdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { errnoOf, FsError, fromErrno } from './errors.ts'
import { ABSENT, currentVersion } from './version.ts'

export function staleError(rel: string, expected: string, current: string): FsError {
  if (expected === ABSENT)
    return new FsError('FS_STALE', `"${rel}" already exists (you have not read it, or it appeared after you looked) — read it, then retry`)
  if (current === ABSENT) return new FsError('FS_STALE', `"${rel}" was deleted since you read it — read it again, then retry`)
  return new FsError('FS_STALE', `"${rel}" changed since you read it — read it again, then retry`)
}

export interface Committed {
  created: boolean
}

/** writes `data` to `real` atomically; `expected` is a version, ABSENT, or undefined for an unconditional write */
export async function commit(real: string, rel: string, data: string, expected: string | undefined): Promise<Committed> {
  const dir = path.dirname(real)
  let mode: number | undefined
  try {
    const info = await stat(real)
    if (!info.isFile())
      throw new FsError('FS_NOT_A_FILE', `"${rel}" is a ${info.isDirectory() ? 'directory' : 'special file'}, not a file; it cannot be written`)
    mode = info.mode & 0o7777
  } catch (error) {
    if (errnoOf(error) === 'ENOTDIR') throw new FsError('FS_NOT_A_FILE', `a parent of "${rel}" is a file, not a directory`)
    if (errnoOf(error) !== 'ENOENT') throw fromErrno(error, rel)
  }
  if (expected !== undefined && expected !== ABSENT && mode === undefined) throw staleError(rel, expected, ABSENT)
  if (expected === ABSENT && mode !== undefined) throw staleError(rel, expected, 'present')
  try {
    await mkdir(dir, { recursive: true })
  } catch (error) {
    throw errnoOf(error) === 'EEXIST' || errnoOf(error) === 'ENOTDIR'
      ? new FsError('FS_NOT_A_FILE', `a parent of "${rel}" is a file, not a directory`)
      : fromErrno(error, rel)
  }
  const temp = path.join(dir, `.${path.basename(real)}.${randomBytes(6).toString('hex')}.faber-tmp`)
  try {
    await writeFile(temp, data, { flag: 'wx' })
    // keep the permissions of the file being replaced (writeFile's mode would be masked by the umask)
    if (mode !== undefined) await chmod(temp, mode)
    if (expected === ABSENT) {
      try {
        await link(temp, real)
        return { created: true }
      } catch (error) {
        const errno = errnoOf(error)
        if (errno === 'EEXIST') throw staleError(rel, expected, 'present')
        // file systems without hard links: fall back to a check right before the rename
        if (errno !== 'EPERM' && errno !== 'ENOTSUP' && errno !== 'EOPNOTSUPP' && errno !== 'EMLINK') throw error
        if ((await currentVersion(real)) !== ABSENT) throw staleError(rel, expected, 'present')
      }
    } else if (expected !== undefined) {
      const current = await currentVersion(real)
      if (current !== expected) throw staleError(rel, expected, current)
    }
    await rename(temp, real)
    return { created: mode === undefined }
  } catch (error) {
    throw fromErrno(error, rel)
  } finally {
    await rm(temp, { force: true }).catch(() => {})
  }
}
