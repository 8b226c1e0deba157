// the six tool definitions over one workspace.

import { type FileHandle, readdir, stat } from 'node:fs/promises'
import { defineTool, type Execution, type ToolDefinition, t } from '@faber/core'
import type { Context } from 'cordis'
import { commit } from './commit.ts'
import { directoryPath, openInside, readAll } from './descriptor.ts'
import { FsError, fromErrno } from './errors.ts'
import { compileGlob, type WalkedFile, walk } from './search.ts'
import { clip, countOccurrences, decodeText, looksBinary, numbered, splitLines } from './text.ts'
import { ABSENT, versionOf } from './version.ts'
import type { Workspace } from './workspace.ts'

export interface FsLimits {
  maxFileBytes: number
  readLines: number
  maxLineChars: number
  maxResults: number
  grepLimit: number
  ignore: readonly string[]
}

const GREP_CONCURRENCY = 32
const GREP_LINE_CHARS = 400

const path = t.string().describe('a path relative to the workspace root (an absolute path must lie inside the root)')
const expectedVersion = t
  .string({ minLength: 1 })
  .describe(`write only if the file is still at this version (from read/write/edit), or "${ABSENT}" to only create`)
  .optional()

function size(bytes: number) {
  return bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`
}

async function loadText(workspace: Workspace, real: string, rel: string, limits: FsLimits, verb: string) {
  // read through a checked descriptor: a symlink swapped in after the path check cannot redirect the read
  const handle = await openInside(workspace, real, rel)
  try {
    const info = await handle.stat()
    if (info.isDirectory()) throw new FsError('FS_NOT_A_FILE', `"${rel}" is a directory, not a file; use list to see what it holds`)
    if (!info.isFile()) throw new FsError('FS_NOT_A_FILE', `"${rel}" is not a regular file`)
    if (info.size > limits.maxFileBytes) {
      throw new FsError(
        'FS_TOO_LARGE',
        `"${rel}" is ${size(info.size)}, over the ${size(limits.maxFileBytes)} limit for ${verb}; use grep to find what you need in it`,
      )
    }
    let bytes: Buffer
    try {
      bytes = await readAll(handle)
    } catch (error) {
      throw fromErrno(error, rel)
    }
    if (bytes.length > limits.maxFileBytes) {
      throw new FsError(
        'FS_TOO_LARGE',
        `"${rel}" is ${size(bytes.length)}, over the ${size(limits.maxFileBytes)} limit for ${verb}; use grep to find what you need in it`,
      )
    }
    const text = decodeText(bytes)
    if (text === undefined)
      throw new FsError('FS_BINARY', `"${rel}" is a binary file (not UTF-8 text), so it cannot be ${verb === 'read' ? 'read' : 'edited'} as text`)
    return { text, version: versionOf(bytes) }
  } finally {
    await handle.close()
  }
}

/** the edited text, or the error saying why oldString does not pick one place */
function applyEdit(text: string, rel: string, args: { oldString: string; newString: string; replaceAll?: boolean }) {
  let oldString = args.oldString
  let newString = args.newString
  let count = countOccurrences(text, oldString)
  // a model sees lines without their \r: match a CRLF file's line ends and keep them
  if (count === 0 && text.includes('\r\n') && oldString.includes('\n') && !oldString.includes('\r')) {
    oldString = oldString.replaceAll('\n', '\r\n')
    newString = newString.replaceAll('\n', '\r\n')
    count = countOccurrences(text, oldString)
  }
  if (count === 0) throw new FsError('FS_NO_MATCH', `oldString was not found in "${rel}"; read the file and copy the text exactly (without line numbers)`)
  if (count > 1 && !args.replaceAll) {
    throw new FsError('FS_AMBIGUOUS_MATCH', `oldString occurs ${count} times in "${rel}"; include more surrounding text to pick one, or set replaceAll`)
  }
  const next = args.replaceAll ? text.replaceAll(oldString, () => newString) : text.replace(oldString, () => newString)
  return { next, count }
}

/** the call's own expectedVersion and the one an observation policy supplies through `fs/expected-version` */
async function expectations(ctx: Context, exec: Execution, rel: string, own: string | undefined): Promise<string[]> {
  const supplied = await ctx.serial('fs/expected-version', exec, rel)
  const list: string[] = []
  if (own !== undefined) list.push(own)
  if (typeof supplied === 'string' && supplied !== own) list.push(supplied)
  return list
}

export function fsTools(ctx: Context, workspace: Workspace, limits: FsLimits): ToolDefinition[] {
  const ignore = new Set(limits.ignore)
  const hints = { fsRoot: workspace.root }

  const read = defineTool({
    name: 'read',
    description:
      'Read a UTF-8 text file. Returns its lines numbered from 1 (a window of them with offset/limit) and its version, ' +
      'which write and edit can require to be unchanged.',
    parameters: t.object({
      path,
      offset: t.integer({ minimum: 1 }).describe('the first line to return, counting from 1').optional(),
      limit: t.integer({ minimum: 1 }).describe(`how many lines to return (default ${limits.readLines})`).optional(),
    }),
    output: {
      schema: t.object({
        path: t.string().describe('the path relative to the workspace root'),
        version: t.string().describe('the SHA-256 of the whole file, "sha256:<hex>"'),
        text: t.string().describe('the lines, each as "<number>\\t<line>"'),
        offset: t.integer().describe('the number of the first line shown'),
        lines: t.integer().describe('how many lines are shown'),
        totalLines: t.integer(),
        truncated: t.boolean().describe('true when lines after this window were not shown'),
      }),
      render: (_, v) => {
        const end = v.offset + v.lines - 1
        let head = `${v.path} (version ${v.version}, ${v.totalLines} line${v.totalLines === 1 ? '' : 's'})`
        if (v.totalLines === 0) return `${head}\n(empty file)`
        if (v.lines === 0) return `${head}\n(offset ${v.offset} is past the end of the file)`
        if (v.offset > 1 || v.truncated) head += `, lines ${v.offset}-${end}`
        const more = v.truncated ? `\n(more lines follow: read with offset ${end + 1} to continue)` : ''
        return `${head}\n${v.text}${more}`
      },
    },
    isConcurrencySafe: () => true,
    annotations: { readOnly: true, ...hints },
    async execute(args) {
      const { rel, real } = await workspace.resolve(args.path)
      const { text, version } = await loadText(workspace, real, rel, limits, 'read')
      const all = splitLines(text)
      const offset = args.offset ?? 1
      const window = all.slice(offset - 1, offset - 1 + (args.limit ?? limits.readLines))
      return {
        path: rel,
        version,
        text: numbered(window, offset, limits.maxLineChars),
        offset,
        lines: window.length,
        totalLines: all.length,
        truncated: offset - 1 + window.length < all.length,
      }
    },
  })

  const write = defineTool({
    name: 'write',
    description:
      'Create a file or replace its whole content, atomically. Parent directories are created. ' +
      'Replacing a file you have not read may be refused by policy; read it first.',
    parameters: t.object({
      path,
      content: t.string().describe('the complete new content of the file'),
      expectedVersion,
    }),
    output: {
      schema: t.object({
        path: t.string(),
        version: t.string().describe('the version of the file as written'),
        created: t.boolean().describe('true when the file did not exist before'),
        bytes: t.integer(),
      }),
      render: (_, v) => `${v.created ? 'created' : 'wrote'} ${v.path} (${v.bytes} bytes, version ${v.version})`,
    },
    annotations: { destructive: true, ...hints },
    async execute(args, run) {
      const { rel, real } = await workspace.resolve(args.path)
      if (rel === '.') throw new FsError('FS_NOT_A_FILE', 'the workspace root is a directory, not a file')
      const expected = await expectations(ctx, run.exec, rel, args.expectedVersion)
      // two different expectations cannot both hold; fail as stale without touching the file
      if (expected.length > 1) throw new FsError('FS_STALE', `"${rel}" changed since you read it — read it again, then retry`)
      const { created } = await commit(workspace, real, rel, args.content, expected[0])
      return { path: rel, version: versionOf(args.content), created, bytes: Buffer.byteLength(args.content) }
    },
  })

  const edit = defineTool({
    name: 'edit',
    description:
      'Replace an exact piece of text in a file. oldString must occur exactly once (or set replaceAll); ' +
      'include enough surrounding lines to make it unique. Read the file first.',
    parameters: t.object({
      path,
      oldString: t.string({ minLength: 1 }).describe('the exact text to replace, as it appears in the file (without line numbers)'),
      newString: t.string().describe('the text to put in its place'),
      replaceAll: t.boolean().describe('replace every occurrence instead of requiring exactly one').optional(),
      expectedVersion,
    }),
    output: {
      schema: t.object({
        path: t.string(),
        version: t.string().describe('the version of the file after the edit'),
        replacements: t.integer(),
      }),
      render: (_, v) => `edited ${v.path}: ${v.replacements} replacement${v.replacements === 1 ? '' : 's'} (version ${v.version})`,
    },
    annotations: { destructive: true, ...hints },
    async execute(args, run) {
      const { rel, real } = await workspace.resolve(args.path)
      if (args.oldString === args.newString) throw new FsError('FS_INVALID_ARGUMENT', 'oldString and newString are the same; there is nothing to change')
      let required: string[] | undefined
      // without a required version the edit applies to the file as it is: a change that lands between its read and
      // its commit (FS_STALE or FS_CONFLICT, the other change intact) is read again and the edit redone on top of it
      for (let attempt = 1; ; attempt++) {
        const { text, version } = await loadText(workspace, real, rel, limits, 'edit')
        required ??= await expectations(ctx, run.exec, rel, args.expectedVersion)
        for (const expected of required) {
          if (expected !== version) throw new FsError('FS_STALE', `"${rel}" changed since you read it — read it again, then retry`)
        }
        const { next, count } = applyEdit(text, rel, args)
        try {
          // always conditional on the content the edit was computed from, so a concurrent change is never lost
          await commit(workspace, real, rel, next, version)
        } catch (error) {
          const code = (error as FsError).code
          if (required.length || attempt === 3 || (code !== 'FS_STALE' && code !== 'FS_CONFLICT')) throw error
          continue
        }
        return { path: rel, version: versionOf(next), replacements: args.replaceAll ? count : 1 }
      }
    },
  })

  const entry = t.object({
    name: t.string(),
    type: t.enum(['file', 'directory', 'symlink', 'other']),
    size: t.integer().describe('bytes, for files').optional(),
  })

  const list = defineTool({
    name: 'list',
    description: 'List the entries of a directory (not recursive), sorted by name.',
    parameters: t.object({ path: path.optional() }),
    output: {
      schema: t.object({ path: t.string(), entries: t.array(entry), truncated: t.boolean() }),
      render: (_, v) => {
        const marks: Record<string, string> = { directory: '/', symlink: '@', file: '', other: '' }
        const lines = v.entries.map((e) => `${e.name}${marks[e.type]}`)
        if (!lines.length) lines.push('(empty directory)')
        if (v.truncated) lines.push(`(only the first ${v.entries.length} entries are shown)`)
        return `${v.path}:\n${lines.join('\n')}`
      },
    },
    isConcurrencySafe: () => true,
    annotations: { readOnly: true, ...hints },
    async execute(args) {
      const { rel, real } = await workspace.resolve(args.path ?? '.')
      // the directory is listed through a checked descriptor, so a link swapped in cannot show another directory
      const handle = await openInside(workspace, real, rel)
      try {
        return await listing(handle, rel, real)
      } finally {
        await handle.close()
      }
    },
  })

  async function listing(handle: FileHandle, rel: string, real: string) {
    {
      if (!(await handle.stat()).isDirectory()) throw new FsError('FS_NOT_A_DIRECTORY', `"${rel}" is a file, not a directory; use read`)
      const dir = directoryPath(handle, real)
      let dirents: import('node:fs').Dirent[]
      try {
        dirents = await readdir(dir, { withFileTypes: true })
      } catch (error) {
        if ((error as { code?: string }).code === 'ENOTDIR') throw new FsError('FS_NOT_A_DIRECTORY', `"${rel}" is a file, not a directory; use read`)
        throw fromErrno(error, rel)
      }
      dirents.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      const shown = dirents.slice(0, limits.maxResults)
      const entries = await Promise.all(
        shown.map(async (d) => {
          if (d.isDirectory()) return { name: d.name, type: 'directory' as const }
          if (d.isSymbolicLink()) return { name: d.name, type: 'symlink' as const }
          if (!d.isFile()) return { name: d.name, type: 'other' as const }
          const bytes = await stat(`${dir}/${d.name}`).then(
            (s) => s.size,
            () => undefined,
          )
          return bytes === undefined ? { name: d.name, type: 'file' as const } : { name: d.name, type: 'file' as const, size: bytes }
        }),
      )
      return { path: rel, entries, truncated: dirents.length > shown.length }
    }
  }

  async function searchRoot(input: string | undefined) {
    const { rel, real } = await workspace.resolve(input ?? '.')
    let info: Awaited<ReturnType<typeof stat>>
    try {
      info = await stat(real)
    } catch (error) {
      throw fromErrno(error, rel)
    }
    return { rel, real, isFile: info.isFile() }
  }

  const glob = defineTool({
    name: 'glob',
    description:
      'Find files by name pattern: * and ? within a path segment, ** across segments, [abc], {a,b}. A pattern without "/" matches ' +
      `file names at any depth ("*.ts"); one with "/" matches paths relative to path ("src/**/*.test.ts"). Skips ${limits.ignore.join(', ') || 'nothing'}.`,
    parameters: t.object({
      pattern: t.string({ minLength: 1 }),
      path: path.describe('the directory to search (default: the workspace root)').optional(),
    }),
    output: {
      schema: t.object({ matches: t.array(t.string()).describe('paths relative to the workspace root, sorted'), truncated: t.boolean() }),
      render: (args, v) => {
        if (!v.matches.length) return `no files match ${JSON.stringify(args.pattern)}`
        const more = v.truncated ? `\n(only the first ${v.matches.length} matches are shown; narrow the pattern or path)` : ''
        return v.matches.join('\n') + more
      },
    },
    isConcurrencySafe: () => true,
    annotations: { readOnly: true, ...hints },
    async execute(args, run) {
      const matches = compileGlob(args.pattern)
      const base = await searchRoot(args.path)
      if (base.isFile) throw new FsError('FS_NOT_A_DIRECTORY', `"${base.rel}" is a file, not a directory`)
      const found: string[] = []
      let truncated = false
      await walk(workspace, base.real, ignore, run.signal, (file) => {
        if (!matches(file.sub)) return
        if (found.length === limits.maxResults) {
          truncated = true
          return false
        }
        found.push(file.rel)
      })
      found.sort()
      return { matches: found, truncated }
    },
  })

  const match = t.object({ path: t.string(), line: t.integer(), text: t.string() })

  const grep = defineTool({
    name: 'grep',
    description:
      'Search file contents with a JavaScript regular expression, line by line. Returns matching lines with their paths and line numbers, ' +
      'capped at limit (truncated says when more were found). Skips binary files, files over the size limit and ' +
      `${limits.ignore.join(', ') || 'nothing'}.`,
    parameters: t.object({
      pattern: t.string({ minLength: 1 }).describe('a JavaScript regular expression, without slashes'),
      path: path.describe('a directory or file to search (default: the workspace root)').optional(),
      glob: t.string({ minLength: 1 }).describe('only search files matching this glob (as in the glob tool), e.g. "*.ts"').optional(),
      ignoreCase: t.boolean().optional(),
      limit: t.integer({ minimum: 1, maximum: limits.maxResults }).describe(`the most matching lines to return (default ${limits.grepLimit})`).optional(),
    }),
    output: {
      schema: t.object({
        matches: t.array(match),
        truncated: t.boolean().describe('true when more lines matched than were returned'),
        filesSearched: t.integer(),
        filesSkipped: t.integer().describe('binary files and files over the size limit'),
      }),
      render: (args, v) => {
        if (!v.matches.length) return `no lines match /${args.pattern}/ (${v.filesSearched} files searched)`
        const lines = v.matches.map((m) => `${m.path}:${m.line}: ${m.text}`)
        if (v.truncated) lines.push(`(only the first ${v.matches.length} matches are shown; narrow the pattern, path or glob)`)
        return lines.join('\n')
      },
    },
    isConcurrencySafe: () => true,
    annotations: { readOnly: true, ...hints },
    async execute(args, run) {
      let line: RegExp
      let whole: RegExp
      try {
        const flags = args.ignoreCase ? 'i' : ''
        line = new RegExp(args.pattern, flags)
        whole = new RegExp(args.pattern, `${flags}m`)
      } catch (error) {
        throw new FsError('FS_INVALID_PATTERN', `the regular expression does not compile: ${(error as Error).message}`)
      }
      const filter = args.glob === undefined ? undefined : compileGlob(args.glob)
      const limit = args.limit ?? limits.grepLimit
      const base = await searchRoot(args.path)
      const files: WalkedFile[] = []
      if (base.isFile) files.push({ rel: base.rel, sub: base.rel.slice(base.rel.lastIndexOf('/') + 1), real: base.real })
      else
        await walk(workspace, base.real, ignore, run.signal, (file) => {
          if (!filter || filter(file.sub)) files.push(file)
        })

      // files are read in parallel; results are kept per file so the order is the walk's, whatever finishes first
      const perFile: (readonly { path: string; line: number; text: string }[] | undefined)[] = new Array(files.length)
      let found = 0
      let skipped = 0
      let next = 0
      let searched = 0
      const worker = async () => {
        while (next < files.length && found <= limit) {
          if (run.signal.aborted) throw run.signal.reason ?? new Error('aborted')
          const index = next++
          const file = files[index]
          let bytes: Buffer
          try {
            // through a checked descriptor, like read: a file swapped for a link out of the root is skipped
            const handle = await openInside(workspace, file.real, file.rel)
            try {
              bytes = await readAll(handle)
            } finally {
              await handle.close()
            }
          } catch {
            continue
          }
          if (bytes.length > limits.maxFileBytes || looksBinary(bytes)) {
            skipped++
            continue
          }
          searched++
          const text = bytes.toString('utf8')
          // one scan of the whole text rejects most files before splitting lines (only sound without \r: `$`)
          if (!text.includes('\r') && !whole.test(text)) continue
          const hits: { path: string; line: number; text: string }[] = []
          const lines = splitLines(text)
          for (let i = 0; i < lines.length; i++) {
            if (!line.test(lines[i])) continue
            hits.push({ path: file.rel, line: i + 1, text: clip(lines[i], GREP_LINE_CHARS) })
            if (hits.length > limit) break
          }
          if (hits.length) {
            perFile[index] = hits
            found += hits.length
          }
        }
      }
      await Promise.all(Array.from({ length: Math.min(GREP_CONCURRENCY, files.length) }, worker))
      const matches = perFile.flatMap((hits) => hits ?? [])
      return { matches: matches.slice(0, limit), truncated: matches.length > limit, filesSearched: searched, filesSkipped: skipped }
    },
  })

  return [read, write, edit, list, glob, grep] as ToolDefinition[]
}
