// the workspace root and path resolution. every path a tool touches goes through `resolve`, which refuses
// `..`, absolute paths outside the root and symlinks that lead out of it (the realpath of the longest existing
// prefix, with dangling links followed by hand so a write through one cannot land outside either).

import { realpathSync, statSync } from 'node:fs'
import { lstat, readlink, realpath } from 'node:fs/promises'
import path from 'node:path'
import { errnoOf, FsError, fromErrno } from './errors.ts'

export interface Resolved {
  /** the path relative to the root, lexically normalized, `/`-separated; `.` is the root itself */
  rel: string
  /** the absolute path with symlinks resolved, inside the root; what I/O uses (it may not exist yet) */
  real: string
}

const MAX_LINKS = 40

export class Workspace {
  /** the root with symlinks resolved */
  readonly root: string
  /** the root as configured, made absolute; absolute inputs under either spelling are accepted */
  readonly given: string

  constructor(root: string) {
    this.given = path.resolve(root)
    let real: string
    try {
      real = realpathSync(this.given)
    } catch {
      throw new TypeError(`tools-fs: the workspace root "${root}" does not exist; create it or fix the root option`)
    }
    if (!statSync(real).isDirectory()) throw new TypeError(`tools-fs: the workspace root "${root}" is not a directory`)
    this.root = real
  }

  contains(real: string): boolean {
    return real === this.root || real.startsWith(this.root.endsWith(path.sep) ? this.root : this.root + path.sep)
  }

  /** the root-relative, `/`-separated form of an absolute path inside the root */
  relative(real: string): string {
    return path.relative(this.root, real).split(path.sep).join('/') || '.'
  }

  /** the lexical root-relative path of an input; throws FS_OUTSIDE_ROOT when it leaves the root */
  lexical(input: string): string {
    if (input.includes('\0')) throw new FsError('FS_INVALID_ARGUMENT', 'a path cannot contain a NUL character')
    const text = input === '' ? '.' : input
    if (path.isAbsolute(text)) {
      const abs = path.resolve(text)
      for (const base of [this.root, this.given]) {
        const rel = path.relative(base, abs)
        if (inside(rel)) return rel.split(path.sep).join('/') || '.'
      }
      throw new FsError('FS_OUTSIDE_ROOT', `"${input}" is outside the workspace root; use a path relative to the root, such as "src/index.ts"`)
    }
    const rel = path.relative(this.root, path.resolve(this.root, text))
    if (!inside(rel)) throw new FsError('FS_OUTSIDE_ROOT', `"${input}" leads outside the workspace root; use a path inside it, such as "src/index.ts"`)
    return rel.split(path.sep).join('/') || '.'
  }

  async resolve(input: string): Promise<Resolved> {
    const rel = this.lexical(input)
    const real = await this.realOf(rel === '.' ? this.root : path.join(this.root, rel), rel)
    if (!this.contains(real)) {
      throw new FsError('FS_OUTSIDE_ROOT', `"${rel}" leads outside the workspace root through a symbolic link, so it cannot be used`)
    }
    return { rel, real }
  }

  private async realOf(abs: string, rel: string): Promise<string> {
    let head = abs
    const tail: string[] = []
    let links = 0
    for (;;) {
      try {
        const real = await realpath(head)
        return tail.length ? path.join(real, ...tail) : real
      } catch (error) {
        const errno = errnoOf(error)
        if (errno === 'ELOOP') throw new FsError('FS_IO', `ELOOP on "${rel}": too many levels of symbolic links`)
        if (errno !== 'ENOENT' && errno !== 'ENOTDIR') throw fromErrno(error, rel)
      }
      // head is missing or a dangling symlink; follow a link by hand, else step up to the parent
      let target: string | undefined
      try {
        if ((await lstat(head)).isSymbolicLink()) target = await readlink(head)
      } catch {}
      if (target !== undefined) {
        if (++links > MAX_LINKS) throw new FsError('FS_IO', `ELOOP on "${rel}": too many levels of symbolic links`)
        head = path.resolve(path.dirname(head), target)
        continue
      }
      const parent = path.dirname(head)
      if (parent === head) return path.join(head, ...tail)
      tail.unshift(path.basename(head))
      head = parent
    }
  }
}

function inside(rel: string) {
  return rel === '' || (!path.isAbsolute(rel) && rel !== '..' && !rel.startsWith(`..${path.sep}`))
}
