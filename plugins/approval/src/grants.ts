// remembered grants: what they match, and the table of the deployment's store that keeps the persisted ones.

import { createHash, randomUUID } from 'node:crypto'
import { canonicalJson, type Json, messageOf } from '@faber/core'
import { changeTrigger, type Migration, type Store } from '@faber/store'
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
  /** the conversation (`exec.session`, an MCP session) a session grant was made in: it applies there only, and ends with it */
  session?: string
  decision?: Decision
  scope: GrantScope
}

export interface Grant {
  readonly id: string
  readonly tool: string
  readonly arguments?: Readonly<Record<string, string>>
  readonly command?: string
  readonly agent?: string
  readonly session?: string
  readonly decision: Decision
  readonly scope: GrantScope
  readonly createdAt: string
  /** who made it: the answerer's plugin, or `api` */
  readonly by?: string
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

/** checks one imported grant; an id is derived from the content when the operator left it out */
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
    // messageOf: an import's caller may hand in a Proxy, which throws whatever it likes
    throw new TypeError(`${at}: ${messageOf(error)}`)
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
    ...(input.session !== undefined ? { session: input.session } : {}),
    decision: input.decision ?? 'allow',
    scope: input.scope,
    createdAt: new Date().toISOString(),
    by,
  })
}

/** the JSON form of persisted grants, for export and import: `{ "version": 1, "grants": [...] }` */
export interface GrantExport {
  version: 1
  grants: {
    id: string
    tool: string
    arguments?: Record<string, string>
    command?: string
    agent?: string
    decision: Decision
    createdAt: string
    by?: string
  }[]
}

const GRANT_COLUMNS = `id TEXT NOT NULL UNIQUE,
  tool TEXT NOT NULL,
  arguments TEXT,
  command TEXT,
  agent TEXT,
  decision TEXT NOT NULL CHECK (decision IN ('allow', 'reject')),
  created_at TEXT NOT NULL,
  by TEXT`

const PENDING_COLUMNS = `id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  root_call_id TEXT NOT NULL,
  call_id TEXT NOT NULL,
  tool TEXT NOT NULL,
  agent TEXT,
  arguments TEXT NOT NULL,
  reason TEXT NOT NULL,
  asked_at TEXT NOT NULL,
  decision TEXT CHECK (decision IN ('allow', 'reject')),
  answered_by TEXT,
  answered_at TEXT`

const MIGRATIONS: Migration[] = [
  {
    sqlite: `CREATE TABLE approval_grants (seq INTEGER PRIMARY KEY AUTOINCREMENT, ${GRANT_COLUMNS}) STRICT`,
    postgres: `CREATE TABLE approval_grants (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ${GRANT_COLUMNS})`,
  },
  // readers on other hosts cache the grants until this trigger says they changed (SQLite: data_version)
  { sqlite: '', postgres: changeTrigger('approval_grants') },
  // the questions waiting for a person (pending.ts), so another process can see and answer them
  { sqlite: `CREATE TABLE approval_pending (${PENDING_COLUMNS}) STRICT`, postgres: `CREATE TABLE approval_pending (${PENDING_COLUMNS})` },
  { sqlite: '', postgres: changeTrigger('approval_pending') },
  // a question's answer is taken after a restart in its own session only, and until its deadline only
  'ALTER TABLE approval_pending ADD COLUMN session TEXT',
  'ALTER TABLE approval_pending ADD COLUMN expires_at TEXT',
]

const LIST = 'SELECT id, tool, arguments, command, agent, decision, created_at, by FROM approval_grants ORDER BY seq'
const ADD = 'INSERT INTO approval_grants (id, tool, arguments, command, agent, decision, created_at, by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'
const UPSERT = `${ADD} ON CONFLICT (id) DO UPDATE SET tool = excluded.tool, arguments = excluded.arguments, command = excluded.command,
  agent = excluded.agent, decision = excluded.decision, created_at = excluded.created_at, by = excluded.by`

interface Row {
  id: string
  tool: string
  arguments: string | null
  command: string | null
  agent: string | null
  decision: Decision
  created_at: string
  by: string | null
}

function fromRow(row: Row): Grant {
  return Object.freeze({
    id: row.id,
    tool: row.tool,
    arguments: row.arguments === null ? undefined : Object.freeze(JSON.parse(row.arguments) as Record<string, string>),
    command: row.command ?? undefined,
    agent: row.agent ?? undefined,
    decision: row.decision,
    scope: 'always',
    createdAt: row.created_at,
    by: row.by ?? undefined,
  })
}

/**
 * the persisted (`always`) grants, in the deployment's store (table `approval_grants`). every change is one
 * transaction, so processes and hosts sharing the store never lose each other's grants. the table is brought to
 * its version on first use; a store a newer Faber wrote makes every call reject, naming it.
 */
export class GrantStore {
  private migrated?: Promise<void>

  constructor(readonly store: Store) {}

  /** brings the table to its version (once; again after a failure) */
  ready(): Promise<void> {
    this.migrated ??= this.store.migrate('approval', MIGRATIONS).catch((error) => {
      this.migrated = undefined
      throw error
    })
    return this.migrated
  }

  /** every persisted grant, oldest first; rejects, naming it, on a row that is not a grant (see `read`) */
  async list(): Promise<Grant[]> {
    return (await this.read()).map((row) => {
      if ('grant' in row) return row.grant
      const { id, problem } = row.unreadable
      throw new TypeError(`the grant "${id}" in ${this.store.path} cannot be read (${problem}); revoke it (faber grants revoke ${id}) or fix it`)
    })
  }

  /**
   * every persisted row, oldest first, each as its grant or, when another writer left one that is not a grant (its
   * arguments not JSON, a pattern that does not compile), as its id and decision and what is wrong with it
   */
  async read(): Promise<({ grant: Grant; matches: Matcher } | { unreadable: { id: string; tool: string; decision: Decision; problem: string } })[]> {
    await this.ready()
    return (await this.store.all<Row>(LIST)).map((row) => {
      try {
        const grant = fromRow(row)
        return { grant, matches: compileMatcher(grant) }
      } catch (error) {
        return {
          unreadable: { id: String(row.id), tool: String(row.tool), decision: row.decision, problem: messageOf(error) },
        }
      }
    })
  }

  /** adds a grant; committed (on disk, on the server) when this resolves */
  async add(grant: Grant): Promise<void> {
    await this.ready()
    await this.store.run(ADD, values(grant))
  }

  /** removes a grant by id; true when there was one */
  async remove(id: string): Promise<boolean> {
    await this.ready()
    return (await this.store.run('DELETE FROM approval_grants WHERE id = ?', [id])) > 0
  }

  async export(): Promise<GrantExport> {
    return { version: 1, grants: (await this.list()).map(({ scope: _, ...grant }) => JSON.parse(JSON.stringify(grant))) }
  }

  /**
   * adds the grants of an export (an entry with the id of a stored grant replaces it), all or nothing; with
   * `replace`, the stored grants not in it are removed. rejects with a TypeError naming the first bad entry.
   */
  async import(data: unknown, options: { replace?: boolean } = {}): Promise<number> {
    const grants = (data as { grants?: unknown })?.grants
    if ((data as { version?: unknown })?.version !== 1 || !Array.isArray(grants)) {
      throw new TypeError('grants to import must be { "version": 1, "grants": [...] } (what `faber grants export` writes)')
    }
    const checked = grants.map(readGrant)
    await this.ready()
    await this.store.transaction(async (tx) => {
      if (options.replace) await tx.run('DELETE FROM approval_grants')
      for (const grant of checked) await tx.run(UPSERT, values(grant))
    })
    return checked.length
  }
}

function values(grant: Grant) {
  const args = grant.arguments === undefined ? null : JSON.stringify(grant.arguments)
  return [grant.id, grant.tool, args, grant.command ?? null, grant.agent ?? null, grant.decision, grant.createdAt, grant.by ?? null]
}
