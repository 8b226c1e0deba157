// remembered grants: what they match, and the JSON file that keeps the persisted ones. the file is written
// atomically (a temp file renamed over it), re-read before every write so an operator's edits are kept, and never
// overwritten when it cannot be read as a grant file.

import { createHash, randomUUID } from 'node:crypto'
import { mkdir, readFile, rename, unlink, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { canonicalJson, type Json } from '@faber/core'
import { compileCommandPattern } from './commands.ts'

export type Decision = 'allow' | 'reject'
export type GrantScope = 'once' | 'session' | 'always'

export interface GrantInput {
  /** a tool-name pattern: `*` any run of characters, `?` one */
  tool: string
  /** JSON path (`$.path`, `$.options.mode`, `$.items[0]`) → regular expression the value must match; all must */
  arguments?: Record<string, string>
  /** a shell-command pattern for the `command` argument (`git diff *`): see commands.ts and the README */
  command?: string
  /** the agent's name; absent: any agent */
  agent?: string
  decision?: Decision
  scope: GrantScope
}

export interface Grant {
  readonly id: string
  readonly tool: string
  readonly arguments?: Readonly<Record<string, string>>
  readonly command?: string
  readonly agent?: string
  readonly decision: Decision
  readonly scope: GrantScope
  readonly createdAt: string
  /** who made it: the answerer's plugin, or `api` */
  readonly by?: string
}

export class GrantFileError extends Error {
  constructor(
    readonly file: string,
    problem: string,
  ) {
    super(
      `the grant file ${file} cannot be used: ${problem}. It was left untouched and the grants in it are not in effect; ` +
        'fix or remove it, then call ctx.approval.reload() or restart',
    )
    this.name = 'GrantFileError'
  }
}

function globToRegExp(pattern: string) {
  return new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  )
}

const STEP = /\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]/y

/** the value at a simple JSON path (`$`, `.key`, `["key"]`, `[0]`), or undefined */
function valueAt(value: Json, path: string): Json | undefined {
  if (!path.startsWith('$')) throw new TypeError(`${JSON.stringify(path)} is not a JSON path; start it with "$", e.g. "$.path"`)
  let current: Json | undefined = value
  STEP.lastIndex = 1
  while (STEP.lastIndex < path.length) {
    const at = STEP.lastIndex
    const step = STEP.exec(path)
    if (!step) throw new TypeError(`JSON path ${JSON.stringify(path)}: cannot read "${path.slice(at)}"; use .key, ["key"] or [0]`)
    if (current === null || typeof current !== 'object') return undefined
    const key = step[2] !== undefined ? Number(step[2]) : (step[1] ?? JSON.parse(`"${step[3]}"`))
    if (Array.isArray(current) !== (typeof key === 'number')) return undefined
    current = Object.hasOwn(current, key) ? (current as Record<string, Json>)[key] : undefined
  }
  return current
}

export type Matcher = (tool: string, agent: string | undefined, args: Json) => boolean

/** compiles a grant's or rule's conditions; throws a TypeError saying what is wrong */
export function compileMatcher(spec: { tool: string; arguments?: Record<string, string>; command?: string; agent?: string; decision?: Decision }): Matcher {
  if (typeof spec.tool !== 'string' || !spec.tool) throw new TypeError('tool must be a non-empty tool-name pattern')
  const tool = globToRegExp(spec.tool)
  const command = spec.command === undefined ? undefined : compileCommandPattern(spec.command, spec.decision === 'reject' ? 'reject' : 'allow')
  const conditions = Object.entries(spec.arguments ?? {}).map(([path, pattern]) => {
    if (typeof pattern !== 'string') throw new TypeError(`arguments[${JSON.stringify(path)}] must be a regular expression string`)
    valueAt({}, path)
    return { path, pattern: new RegExp(pattern) }
  })
  return (name, agent, args) => {
    if (!tool.test(name)) return false
    if (spec.agent !== undefined && spec.agent !== agent) return false
    if (command) {
      const text = (args as { command?: unknown } | null)?.command
      if (typeof text !== 'string' || !command(text)) return false
    }
    return conditions.every(({ path, pattern }) => {
      const value = valueAt(args, path)
      if (value === undefined) return false
      return pattern.test(typeof value === 'string' ? value : canonicalJson(value))
    })
  }
}

/** checks one grant read from the file; an id is derived from the content when the operator left it out */
function readGrant(raw: unknown, index: number): Grant {
  const at = `grants[${index}]`
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new TypeError(`${at} is not an object`)
  const entry = raw as Record<string, unknown>
  if (entry.decision !== 'allow' && entry.decision !== 'reject') throw new TypeError(`${at}.decision must be "allow" or "reject"`)
  if (entry.agent !== undefined && typeof entry.agent !== 'string') throw new TypeError(`${at}.agent must be a string`)
  if (entry.arguments !== undefined && (typeof entry.arguments !== 'object' || entry.arguments === null || Array.isArray(entry.arguments))) {
    throw new TypeError(`${at}.arguments must be an object of JSON path → regular expression`)
  }
  if (entry.command !== undefined && typeof entry.command !== 'string') throw new TypeError(`${at}.command must be a command pattern string`)
  try {
    compileMatcher(entry as { tool: string })
  } catch (error) {
    throw new TypeError(`${at}: ${(error as Error).message}`)
  }
  const content = {
    tool: entry.tool as string,
    arguments: entry.arguments as Record<string, string> | undefined,
    command: entry.command as string | undefined,
    agent: entry.agent as string | undefined,
  }
  const id =
    typeof entry.id === 'string' && entry.id
      ? entry.id
      : `f-${createHash('sha256')
          .update(canonicalJson({ ...content, decision: entry.decision } as Json))
          .digest('hex')
          .slice(0, 10)}`
  return Object.freeze({
    id,
    ...content,
    decision: entry.decision,
    scope: 'always',
    createdAt: typeof entry.createdAt === 'string' ? entry.createdAt : '',
    by: typeof entry.by === 'string' ? entry.by : undefined,
  })
}

export function newGrant(input: GrantInput, by: string): Grant {
  return Object.freeze({
    id: randomUUID().slice(0, 8),
    tool: input.tool,
    arguments: input.arguments && Object.freeze({ ...input.arguments }),
    command: input.command,
    agent: input.agent,
    decision: input.decision ?? 'allow',
    scope: input.scope,
    createdAt: new Date().toISOString(),
    by,
  })
}

/** the persisted grants: `{ "version": 1, "grants": [...] }` */
export class GrantFile {
  private writing: Promise<unknown> = Promise.resolve()

  constructor(readonly path: string) {}

  /** the grants in the file; none when it does not exist; a GrantFileError when it cannot be read as a grant file */
  async read(): Promise<Grant[]> {
    let text: string
    try {
      text = await readFile(this.path, 'utf8')
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return []
      throw new GrantFileError(this.path, (error as Error).message)
    }
    let data: unknown
    try {
      data = JSON.parse(text)
    } catch (error) {
      throw new GrantFileError(this.path, `it is not JSON (${(error as Error).message})`)
    }
    const grants = (data as { grants?: unknown })?.grants
    if ((data as { version?: unknown })?.version !== 1 || !Array.isArray(grants)) {
      throw new GrantFileError(this.path, 'it is not { "version": 1, "grants": [...] }')
    }
    try {
      return grants.map(readGrant)
    } catch (error) {
      throw new GrantFileError(this.path, (error as Error).message)
    }
  }

  /** re-reads the file, applies `change` and writes the result atomically; writes are serialized */
  update(change: (grants: Grant[]) => Grant[]): Promise<Grant[]> {
    const next = this.writing.then(async () => {
      const grants = change(await this.read())
      const text = `${JSON.stringify({ version: 1, grants: grants.map(({ scope: _, ...grant }) => grant) }, null, 2)}\n`
      await mkdir(dirname(this.path), { recursive: true })
      const temp = `${this.path}.${process.pid}.${randomUUID().slice(0, 8)}.tmp`
      try {
        await writeFile(temp, text, { mode: 0o600, flush: true })
        await rename(temp, this.path)
      } catch (error) {
        await unlink(temp).catch(() => {})
        throw new GrantFileError(this.path, `writing it failed (${(error as Error).message})`)
      }
      return grants
    })
    this.writing = next.catch(() => {})
    return next
  }
}
