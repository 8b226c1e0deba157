// reading through a descriptor whose identity is checked: the path is resolved and checked first (workspace.ts), but
// a symlink swapped in between that check and the open would redirect it. so the file is opened, then asked what it
// really is — on Linux `/proc/self/fd/<n>` names the opened file with every link resolved — and refused when that
// lies outside the root. what is read is then the descriptor's content, whatever the path points at by then.

import { constants, existsSync } from 'node:fs'
import { type FileHandle, open, readlink, realpath, stat } from 'node:fs/promises'
import { FsError, fromErrno } from './errors.ts'
import type { Workspace } from './workspace.ts'

const PROC_FD = existsSync('/proc/self/fd')
// O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for regular files and directories
const READ = constants.O_RDONLY | constants.O_NONBLOCK

/** the real path of what `handle` has open, or undefined when it cannot be told */
async function identify(handle: FileHandle, real: string): Promise<string | undefined> {
  if (PROC_FD) {
    const target = await readlink(`/proc/self/fd/${handle.fd}`)
    return target.endsWith(' (deleted)') ? target.slice(0, -' (deleted)'.length) : target
  }
  // elsewhere: resolve the path again; it must still be the descriptor's file (a swap in between would show)
  const again = await realpath(real).catch(() => undefined)
  if (again === undefined) return
  const [opened, named] = await Promise.all([handle.stat(), stat(again)])
  return opened.dev === named.dev && opened.ino === named.ino ? again : undefined
}

/** throws FS_OUTSIDE_ROOT unless what `handle` has open lies inside the root */
export async function assertInside(workspace: Workspace, handle: FileHandle, real: string, rel: string): Promise<void> {
  const actual = await identify(handle, real)
  if (actual === undefined || !workspace.contains(actual)) {
    throw new FsError('FS_OUTSIDE_ROOT', `"${rel}" leads outside the workspace root through a symbolic link, so it cannot be used`)
  }
}

/** opens `real` for reading and checks what was opened lies inside the root; errors are FsErrors */
export async function openInside(workspace: Workspace, real: string, rel: string): Promise<FileHandle> {
  let handle: FileHandle
  try {
    handle = await open(real, READ)
  } catch (error) {
    throw fromErrno(error, rel)
  }
  try {
    await assertInside(workspace, handle, real, rel)
    return handle
  } catch (error) {
    await handle.close()
    throw error
  }
}

/** a path that reaches the directory `handle` has open, whatever its name points at now (Linux), or `real` */
export function directoryPath(handle: FileHandle, real: string): string {
  return PROC_FD ? `/proc/self/fd/${handle.fd}` : real
}

/** the whole content of an open file, read from offset 0 (whatever the handle's position) */
export async function readAll(handle: FileHandle): Promise<Buffer> {
  const chunks: Buffer[] = []
  let position = 0
  for (;;) {
    const chunk = Buffer.allocUnsafe(64 * 1024)
    const { bytesRead } = await handle.read(chunk, 0, chunk.length, position)
    if (bytesRead === 0) return Buffer.concat(chunks)
    chunks.push(bytesRead === chunk.length ? chunk : chunk.subarray(0, bytesRead))
    position += bytesRead
  }
}

export { READ }
