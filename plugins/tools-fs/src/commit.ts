// atomic, optionally conditional writes: the new bytes go to a temp file in the target's directory, the
// expectation is checked as late as possible, then the temp file replaces the target in one rename.
//
// a conditional write ("must be at version V") holds a descriptor on the file it replaces. before the rename it
// checks through it that the content is V and that the path still names that file; after the rename it reads the
// replaced file once more. a write that landed in between — another process appending, which keeps writing into
// the file it opened even once ours has replaced it — shows there. then the other writer's content is put back
// (with anything appended to ours since kept after it) and the call fails with FS_CONFLICT: nothing is lost
// silently. "must not exist" has no window at all: link(2) refuses an existing target atomically.

import { randomBytes } from 'node:crypto'
import { lstatSync, renameSync, type Stats } from 'node:fs'
import { chmod, type FileHandle, link, mkdir, open, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { assertInside, READ, readAll } from './descriptor.ts'
import { errnoOf, FsError, fromErrno } from './errors.ts'
import { ABSENT, versionOf } from './version.ts'
import type { Workspace } from './workspace.ts'

export function staleError(rel: string, expected: string, current: string): FsError {
  if (expected === ABSENT)
    return new FsError('FS_STALE', `"${rel}" already exists (you have not read it, or it appeared after you looked) — read it, then retry`)
  if (current === ABSENT) return new FsError('FS_STALE', `"${rel}" was deleted since you read it — read it again, then retry`)
  return new FsError('FS_STALE', `"${rel}" changed since you read it — read it again, then retry`)
}

export function conflictError(rel: string): FsError {
  return new FsError(
    'FS_CONFLICT',
    `another process changed "${rel}" while this change was being written; its change is kept and this one was not applied — read the file again, then retry`,
  )
}

export interface Committed {
  created: boolean
}

interface Present {
  handle: FileHandle
  info: Stats
}

/** the file now at `real`, open, checked to lie inside the root; undefined when there is none */
async function present(workspace: Workspace, real: string, rel: string): Promise<Present | undefined> {
  let handle: FileHandle
  try {
    handle = await open(real, READ)
  } catch (error) {
    if (errnoOf(error) === 'ENOENT') return
    if (errnoOf(error) === 'ENOTDIR') throw new FsError('FS_NOT_A_FILE', `a parent of "${rel}" is a file, not a directory`)
    throw fromErrno(error, rel)
  }
  try {
    await assertInside(workspace, handle, real, rel)
    const info = await handle.stat()
    if (!info.isFile())
      throw new FsError('FS_NOT_A_FILE', `"${rel}" is a ${info.isDirectory() ? 'directory' : 'special file'}, not a file; it cannot be written`)
    return { handle, info }
  } catch (error) {
    await handle.close()
    throw error
  }
}

/** the bytes of the file at `real` as it is now (undefined: it is gone), checked as `present` checks it */
async function presentBytes(workspace: Workspace, real: string, rel: string): Promise<Buffer | undefined> {
  const now = await present(workspace, real, rel)
  if (!now) return
  try {
    return await readAll(now.handle)
  } finally {
    await now.handle.close()
  }
}

async function tempFile(real: string, rel: string, data: string | Buffer, mode: number | undefined): Promise<string> {
  const dir = path.dirname(real)
  try {
    await mkdir(dir, { recursive: true })
  } catch (error) {
    throw errnoOf(error) === 'EEXIST' || errnoOf(error) === 'ENOTDIR'
      ? new FsError('FS_NOT_A_FILE', `a parent of "${rel}" is a file, not a directory`)
      : fromErrno(error, rel)
  }
  const temp = path.join(dir, `.${path.basename(real)}.${randomBytes(6).toString('hex')}.faber-tmp`)
  await writeFile(temp, data, { flag: 'wx' })
  // keep the permissions of the file being replaced (writeFile's mode would be masked by the umask)
  if (mode !== undefined) await chmod(temp, mode)
  return temp
}

type Swapped = { kind: 'done'; created: boolean } | { kind: 'stale'; current: string } | { kind: 'raced'; replaced: Buffer }

/**
 * replaces the file at `real` with `data` if it is at `expected` (any version, or undefined: unconditionally).
 * `raced`: the file was at `expected`, but more was written into it while it was being replaced; `replaced` is
 * what it holds now (the new file holds `data`).
 */
async function swap(workspace: Workspace, real: string, rel: string, data: string | Buffer, expected: string | undefined): Promise<Swapped> {
  const old = await present(workspace, real, rel)
  let temp: string | undefined
  let handedOver = false
  try {
    if (expected !== undefined && !old) return { kind: 'stale', current: ABSENT }
    temp = await tempFile(real, rel, data, old ? old.info.mode & 0o7777 : undefined)
    if (old && expected !== undefined) {
      const seen = versionOf(await readAll(old.handle))
      if (seen !== expected) return { kind: 'stale', current: seen }
      // the path must still name the file we hold: an editor may have renamed a new one over it
      const named = await present(workspace, real, rel).catch(() => undefined)
      await named?.handle.close()
      if (!named || named.info.ino !== old.info.ino || named.info.dev !== old.info.dev) return { kind: 'stale', current: named ? 'changed' : ABSENT }
      // the last look and the rename with no turn of the event loop between them: a file another process renames
      // over the name in that window is replaced unseen, so the window is kept to two system calls (asynchronous
      // ones, each a hop through the thread pool, let 2-4 % of such renames fall into it)
      const last = lstatSync(real, { throwIfNoEntry: false })
      if (!last || last.ino !== old.info.ino || last.dev !== old.info.dev) return { kind: 'stale', current: last ? 'changed' : ABSENT }
      renameSync(temp, real)
    } else {
      await rename(temp, real)
    }
    temp = undefined
    if (old && expected !== undefined) {
      const after = await readAll(old.handle)
      // a writer that opened the file before the rename may still write into it: keep watching it for a while
      watchLate(workspace, real, rel, old.handle, after)
      handedOver = true
      if (versionOf(after) !== expected) return { kind: 'raced', replaced: after }
    }
    return { kind: 'done', created: !old }
  } catch (error) {
    throw fromErrno(error, rel)
  } finally {
    if (!handedOver) await old?.handle.close()
    if (temp) await rm(temp, { force: true }).catch(() => {})
  }
}

// after the look that follows the rename, a writer that opened the replaced file before it (an appender between its
// open and its write) can still write into it. for about two seconds the replaced file is looked at again; what was
// appended to it is carried over to the end of the current file. a replaced file rewritten in place cannot be merged
// and is left as it is.
const LATE_LOOKS_MS = [2, 10, 50, 200, 700, 1500]
/** how long putting a change back keeps retrying against a writer that keeps changing the file */
const PERSIST_MS = 10_000
const pause = () => new Promise((resolve) => setTimeout(resolve, Math.random() * 3))
const watching = new Set<Promise<void>>()

function watchLate(workspace: Workspace, real: string, rel: string, handle: FileHandle, seen: Buffer) {
  const watch = (async () => {
    try {
      for (const ms of LATE_LOOKS_MS) {
        await new Promise((resolve) => setTimeout(resolve, ms))
        if ((await handle.stat()).size === seen.length) continue
        const now = await readAll(handle)
        if (!now.subarray(0, seen.length).equals(seen)) return
        await withLock(real, () => carryOver(workspace, real, rel, now.subarray(seen.length)))
        seen = now
      }
    } catch {
      // the file or its directory went away: there is nothing to carry over to
    } finally {
      await handle.close().catch(() => {})
    }
  })()
  watching.add(watch)
  watch.finally(() => watching.delete(watch))
}

/** appends `tail` to the file at `real` by checked swaps, carrying over whatever races in meanwhile too */
async function carryOver(workspace: Workspace, real: string, rel: string, tail: Buffer) {
  for (const deadline = Date.now() + PERSIST_MS; tail.length && Date.now() < deadline; await pause()) {
    const bytes = await presentBytes(workspace, real, rel)
    if (!bytes) return
    const swapped = await swap(workspace, real, rel, Buffer.concat([bytes, tail]), versionOf(bytes))
    if (swapped.kind === 'done') return
    if (swapped.kind === 'raced') tail = swapped.replaced.subarray(bytes.length)
  }
}

/** resolves once every replaced file still being watched for late writes has been looked at for the last time */
export async function settled(): Promise<void> {
  while (watching.size) await Promise.all([...watching])
}

/**
 * after a race: the file holds `ours`, possibly with more appended since; `theirs` is what the replaced file held.
 * puts `theirs` back, followed by whatever was appended to ours, by the same checked swap (which may race again).
 */
async function restore(workspace: Workspace, real: string, rel: string, ours: Buffer, theirs: Buffer): Promise<void> {
  // a busy writer can keep the check failing; keep trying (a change lost is worse than a slow call), within reason
  for (const deadline = Date.now() + PERSIST_MS; Date.now() < deadline; await pause()) {
    const bytes = await presentBytes(workspace, real, rel)
    if (!bytes) return
    // replaced by someone else meanwhile: their content stands
    if (!bytes.subarray(0, ours.length).equals(ours)) return
    const merged = Buffer.concat([theirs, bytes.subarray(ours.length)])
    const swapped = await swap(workspace, real, rel, merged, versionOf(bytes))
    if (swapped.kind === 'done') return
    if (swapped.kind === 'raced') {
      theirs = Buffer.concat([theirs, swapped.replaced.subarray(ours.length)])
      ours = merged
    }
  }
}

/**
 * writes `data` to `real` atomically; `expected` is a version, ABSENT, or undefined for an unconditional write.
 * throws FS_STALE when the file is not at `expected`, FS_CONFLICT when another writer's change landed while it was
 * being replaced (that change is put back and this write is not applied).
 */
export function commit(workspace: Workspace, real: string, rel: string, data: string, expected: string | undefined): Promise<Committed> {
  return withLock(real, () => commitNow(workspace, real, rel, data, expected))
}

// one commit per file at a time in this process: two of ours interleaving at their awaits would each pass the check
// before either renamed, and the second rename would drop the first write
function withLock<T>(real: string, task: () => Promise<T>): Promise<T> {
  const next = (committing.get(real) ?? Promise.resolve()).then(task)
  const settled = next.then(
    () => {},
    () => {},
  )
  committing.set(real, settled)
  settled.then(() => {
    if (committing.get(real) === settled) committing.delete(real)
  })
  return next
}

const committing = new Map<string, Promise<void>>()

async function commitNow(workspace: Workspace, real: string, rel: string, data: string, expected: string | undefined): Promise<Committed> {
  if (expected !== ABSENT) {
    const swapped = await swap(workspace, real, rel, data, expected)
    if (swapped.kind === 'done') return { created: swapped.created }
    if (swapped.kind === 'stale') throw staleError(rel, expected!, swapped.current)
    await restore(workspace, real, rel, Buffer.from(data), swapped.replaced)
    throw conflictError(rel)
  }
  const old = await present(workspace, real, rel)
  if (old) {
    await old.handle.close()
    throw staleError(rel, expected, 'present')
  }
  const temp = await tempFile(real, rel, data, undefined).catch((error) => {
    throw fromErrno(error, rel)
  })
  try {
    await link(temp, real)
    return { created: true }
  } catch (error) {
    const errno = errnoOf(error)
    if (errno === 'EEXIST') throw staleError(rel, expected, 'present')
    // file systems without hard links: fall back to a check right before the rename
    if (errno !== 'EPERM' && errno !== 'ENOTSUP' && errno !== 'EOPNOTSUPP' && errno !== 'EMLINK') throw fromErrno(error, rel)
    const now = await present(workspace, real, rel)
    if (now) {
      await now.handle.close()
      throw staleError(rel, expected, 'present')
    }
    await rename(temp, real).catch((e) => {
      throw fromErrno(e, rel)
    })
    return { created: true }
  } finally {
    await rm(temp, { force: true }).catch(() => {})
  }
}
