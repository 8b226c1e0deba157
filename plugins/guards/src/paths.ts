// where a path really leads: symlinks and `..` resolved by the kernel for the longest prefix that exists; the
// rest does not exist, so it holds no symlinks and `..` in it can be resolved lexically. synchronous on purpose:
// realpath(3) on a local disk takes microseconds, a round trip through libuv's thread pool ten times more.

import { realpathSync } from 'node:fs'
import { isAbsolute, resolve, sep } from 'node:path'

export function resolveReal(path: string, base = process.cwd()): string {
  const absolute = isAbsolute(path) ? path : `${base}${sep}${path}`
  const segments = absolute.split(sep)
  for (let cut = segments.length; cut > 0; cut--) {
    const prefix = segments.slice(0, cut).join(sep) || sep
    try {
      const real = realpathSync.native(prefix)
      return resolve(real, ...segments.slice(cut))
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error
    }
  }
  return resolve(absolute)
}

export function isInside(path: string, root: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep)
}
