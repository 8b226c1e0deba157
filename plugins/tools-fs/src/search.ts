// walking the workspace and matching: the glob dialect and the directory walk glob and grep share.

import type { Dirent } from 'node:fs'
import { readdir, realpath, stat } from 'node:fs/promises'
import path from 'node:path'
import { FsError } from './errors.ts'
import type { Workspace } from './workspace.ts'

export interface WalkedFile {
  /** relative to the workspace root, `/`-separated */
  rel: string
  /** relative to the directory the walk started in */
  sub: string
  real: string
}

function literalChar(char: string) {
  return /[\\^$.*+?()[\]{}|/]/.test(char) ? `\\${char}` : char
}

/**
 * compiles a glob: `*` and `?` stay within one path segment, `**` spans segments, `[abc]`/`[!abc]` are
 * classes and `{a,b}` alternatives. a pattern without `/` matches the file name at any depth (like
 * .gitignore and ripgrep's --glob); one with `/` matches the whole path relative to the search directory.
 */
export function compileGlob(pattern: string): (sub: string) => boolean {
  if (pattern === '') throw new FsError('FS_INVALID_PATTERN', 'the glob pattern is empty')
  const byName = !pattern.includes('/')
  let source = ''
  let braces = 0
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i]
    if (char === '*') {
      if (pattern[i + 1] === '*') {
        const before = i === 0 || pattern[i - 1] === '/'
        const after = pattern[i + 2]
        i++
        if (before && after === '/') {
          source += '(?:[^/]*/)*'
          i++
        } else {
          source += '.*'
        }
      } else {
        source += '[^/]*'
      }
    } else if (char === '?') {
      source += '[^/]'
    } else if (char === '[') {
      const end = pattern.indexOf(']', i + 2)
      if (end === -1) throw new FsError('FS_INVALID_PATTERN', `unclosed "[" in glob ${JSON.stringify(pattern)}`)
      let body = pattern.slice(i + 1, end)
      if (body.startsWith('!')) body = `^${body.slice(1)}`
      source += `[${body.replaceAll('\\', '\\\\')}]`
      i = end
    } else if (char === '{') {
      braces++
      source += '(?:'
    } else if (char === '}' && braces > 0) {
      braces--
      source += ')'
    } else if (char === ',' && braces > 0) {
      source += '|'
    } else {
      source += literalChar(char)
    }
  }
  if (braces) throw new FsError('FS_INVALID_PATTERN', `unclosed "{" in glob ${JSON.stringify(pattern)}`)
  let regexp: RegExp
  try {
    regexp = new RegExp(`^${source}$`)
  } catch (error) {
    throw new FsError('FS_INVALID_PATTERN', `glob ${JSON.stringify(pattern)} does not compile: ${(error as Error).message}`)
  }
  if (!byName) return (sub) => regexp.test(sub)
  return (sub) => regexp.test(sub.slice(sub.lastIndexOf('/') + 1))
}

/**
 * every regular file under `start` (a real directory inside the root), depth first in name order. directories
 * named in `ignore` are skipped; symlinks are followed to files inside the root only, never into directories
 * (no cycles, no escapes).
 */
export async function walk(workspace: Workspace, start: string, ignore: ReadonlySet<string>, signal: AbortSignal, visit: (file: WalkedFile) => boolean | void) {
  const startRel = workspace.relative(start)
  const prefix = startRel === '.' ? '' : `${startRel}/`
  const stack: string[] = ['']
  while (stack.length) {
    if (signal.aborted) throw signal.reason ?? new Error('aborted')
    const dir = stack.pop()!
    let entries: Dirent[]
    try {
      entries = await readdir(dir ? path.join(start, dir) : start, { withFileTypes: true })
    } catch {
      continue
    }
    entries.sort((a, b) => (a.name < b.name ? 1 : a.name > b.name ? -1 : 0))
    const files: WalkedFile[] = []
    for (const entry of entries) {
      const sub = dir ? `${dir}/${entry.name}` : entry.name
      if (entry.isDirectory()) {
        if (!ignore.has(entry.name)) stack.push(sub)
      } else if (entry.isFile()) {
        files.push({ rel: prefix + sub, sub, real: path.join(start, sub) })
      } else if (entry.isSymbolicLink()) {
        const target = await linkedFile(workspace, path.join(start, sub))
        if (target) files.push({ rel: prefix + sub, sub, real: target })
      }
    }
    for (let i = files.length - 1; i >= 0; i--) if (visit(files[i]) === false) return
  }
}

async function linkedFile(workspace: Workspace, link: string): Promise<string | undefined> {
  try {
    const target = await realpath(link)
    if (!workspace.contains(target)) return
    return (await stat(target)).isFile() ? target : undefined
  } catch {}
}
