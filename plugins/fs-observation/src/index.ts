// @faber/plugin-fs-observation: an agent may edit only what it has read, and never overwrite what changed
// since. observations come from `tools/result`; denials happen in `tools/pre-execute` (before approval); the
// freshness that matters is enforced by the tools at write time, through the `fs/expected-version` event.

import { createHash } from 'node:crypto'
import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { type Agent, agentOf, defineConfig, type Execution, messageOf, type PreDecision } from '@faber/core'
import { type Context, Schema } from 'cordis'
import { ABSENT, Observations, pathKey } from './observations.ts'
import { SavedObservations } from './saved.ts'

export { ABSENT, Observations, pathKey } from './observations.ts'

type Role = 'read' | 'write' | 'edit' | 'command'

// results that end a call before its body could run: such a command changed nothing
const NOT_RUN = new Set(['DENIED', 'UNKNOWN_TOOL', 'INVALID_ARGUMENTS', 'ABORTED_BEFORE_DISPATCH', 'DEPLOYMENT_FAILED'])

function errnoOf(error: unknown) {
  return (error as { code?: unknown } | null)?.code
}

/** the version of the file now, in the tools-fs scheme (SHA-256 of the bytes), or ABSENT */
async function versionNow(file: string): Promise<string | undefined> {
  try {
    return `sha256:${createHash('sha256')
      .update(await readFile(file))
      .digest('hex')}`
  } catch (error) {
    if (errnoOf(error) === 'ENOENT' || errnoOf(error) === 'ENOTDIR') return ABSENT
    // not a file (a directory, unreadable): leave the verdict to the tool
    return undefined
  }
}

async function existsNow(file: string): Promise<boolean | undefined> {
  try {
    await stat(file)
    return true
  } catch (error) {
    if (errnoOf(error) === 'ENOENT' || errnoOf(error) === 'ENOTDIR') return false
    return undefined
  }
}

export const name = 'fs-observation'
export const reusable = true
/** the store is optional: with it, what each session's agent observed outlives the process */
export const inject = { tools: { required: true }, store: { required: false } }

export interface Config {
  tools: { read: string[]; write: string[]; edit: string[]; command: string[] }
  pathArgument: string
  root?: string
  checkBeforeApproval: boolean
}

/** what a deployer writes: every key optional */
export type ConfigInput = { tools?: Partial<Config['tools']>; pathArgument?: string; root?: string; checkBeforeApproval?: boolean } | undefined

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    tools: Schema.object({
      read: Schema.array(Schema.string()).default(['read']).description('tools whose results record an observation (path and version)'),
      write: Schema.array(Schema.string()).default(['write']).description('tools that create or replace a whole file'),
      edit: Schema.array(Schema.string()).default(['edit']).description('tools that change part of an existing file'),
      command: Schema.array(Schema.string())
        .default([])
        .description('tools that may change any file (shells); tools annotated changesFiles: true count without being named'),
    }).default({ read: ['read'], write: ['write'], edit: ['edit'], command: [] }),
    pathArgument: Schema.string().default('path').description('the argument of the governed tools that names the file'),
    root: Schema.string().description("where relative paths resolve; default: the governed tool's fsRoot annotation (tools-fs sets it)"),
    checkBeforeApproval: Schema.boolean()
      .default(true)
      .description('also check existence and freshness on disk in tools/pre-execute, so doomed calls are denied before approval is asked'),
  }),
)

export function apply(ctx: Context, config: Config) {
  const scope: Agent | undefined = agentOf(ctx)
  const roles = new Map<string, Role>()
  for (const role of ['read', 'write', 'edit', 'command'] as const) for (const tool of config.tools[role]) roles.set(tool, role)
  const roleOf = (exec: Execution): Role | undefined => roles.get(exec.name) ?? (exec.tool.annotations.changesFiles === true ? 'command' : undefined)
  const observations = new Observations()
  // the session each agent speaks in (from agent/session): its observations are saved under that id
  const sessions = new WeakMap<Agent, string>()
  let agentlessSession: string | undefined
  let saved: SavedObservations | undefined
  /** a resumed session's observations being read back: a write waits for them */
  const restoring = new Set<Promise<void>>()
  const useStore = () => {
    saved?.flush()
    const store = ctx.get('store')?.connection
    saved = store?.open
      ? new SavedObservations(store, (error, lost) =>
          ctx
            .logger('fs-observation')
            .warn(
              '%d observation(s) were not saved to %s (a resumed session reads those files again): %s',
              lost,
              store.path,
              (error as Error)?.message ?? error,
            ),
        )
      : undefined
  }
  useStore()
  ctx.on('internal/service', (name) => {
    if (name === 'store') useStore()
  })
  // the command epoch each read started in: a command finishing while the read runs makes what it read stale
  const readStarted = new WeakMap<object, number>()
  ctx.on('dispose', () => {
    saved?.flush()
    observations.clear()
  })

  const governs = (exec: Execution) => scope === undefined || exec.agent?.isWithin(scope) === true
  const observe = (agent: Agent | undefined, root: string | undefined, key: string, version: string, epoch = observations.epoch) => {
    observations.set(agent, root, key, version, epoch)
    // an observation a command has already made stale is not worth keeping
    if (epoch < observations.epoch) return
    const session = agent ? sessions.get(agent) : agentlessSession
    if (session !== undefined) saved?.write(session, agent?.name ?? '', root ?? '', key, version)
  }

  ctx.on('agent/session', ({ agent, id }) => {
    if (scope !== undefined && agent?.isWithin(scope) !== true) return
    if (agent) sessions.set(agent, id)
    else agentlessSession = id
    if (!saved) return
    const from = saved
    const epoch = observations.epoch
    const done = from
      .read(id, agent?.name ?? '')
      .then((rows) => {
        // what the agent saw since (or a command that ran since) is newer than what was saved
        if (observations.epoch !== epoch) return
        for (const row of rows) {
          if (observations.lookup(agent, row.root || undefined, row.path) === undefined) observations.set(agent, row.root || undefined, row.path, row.version)
        }
      })
      .catch((error) =>
        ctx
          .logger('fs-observation')
          .warn('the observations of session %s could not be read from %s (files are read again): %s', id, from.store.path, messageOf(error)),
      )
      .finally(() => restoring.delete(done))
    restoring.add(done)
  })
  // the disk as it is now, unless a listener answers for it (a replay answers from the recorded calls)
  const versionOf = (file: string) => {
    const told = ctx.bail('fs/disk-version', file)
    return told ? Promise.resolve(told.version) : versionNow(file)
  }
  const exists = (file: string) => {
    const told = ctx.bail('fs/disk-version', file)
    if (!told) return existsNow(file)
    return Promise.resolve(told.version === undefined ? undefined : told.version !== ABSENT)
  }
  const rootOf = (exec: Execution): string | undefined => {
    if (config.root !== undefined) return path.resolve(config.root)
    const hint = exec.tool.annotations.fsRoot
    return typeof hint === 'string' ? hint : undefined
  }

  ctx.tools.listen('tools/result', (exec, result) => {
    const role = roleOf(exec)
    // a command changes the one file system every agent shares, whoever ran it
    if (role === 'command') {
      if (!result.isError || !NOT_RUN.has(result.error.code)) {
        observations.commandRan()
        saved?.forgetAll()
      }
      return
    }
    if (!role || !governs(exec)) return
    const epoch = readStarted.get(exec.token)
    const root = rootOf(exec)
    if (!result.isError) {
      const value = result.value as { path?: unknown; version?: unknown } | null
      if (typeof value?.path !== 'string' || typeof value.version !== 'string') return
      const key = pathKey(root, value.path)
      if (key !== undefined) observe(exec.agent, root, key, value.version, role === 'read' ? epoch : undefined)
    } else if (result.error.toolCode === 'FS_NOT_FOUND') {
      const input = (exec.arguments as Record<string, unknown>)[config.pathArgument]
      const key = typeof input === 'string' ? pathKey(root, input) : undefined
      if (key !== undefined) observe(exec.agent, root, key, ABSENT, epoch)
    }
  })

  ctx.tools.listen('tools/pre-execute', async (exec): Promise<PreDecision | undefined> => {
    const role = roleOf(exec)
    if (role === 'read') readStarted.set(exec.token, observations.epoch)
    if ((role !== 'write' && role !== 'edit') || !governs(exec)) return
    const input = (exec.arguments as Record<string, unknown>)[config.pathArgument]
    if (typeof input !== 'string') return
    if (restoring.size) await Promise.all(restoring)
    const root = rootOf(exec)
    const key = pathKey(root, input)
    // fail closed: a path this policy cannot place is one it cannot vouch for
    if (key === undefined) return { kind: 'deny', reason: `"${input}" is not a path inside the workspace root; use a path relative to the root` }
    const seen = observations.get(exec.agent, root, key)
    const file = root !== undefined && config.checkBeforeApproval ? path.join(root, key) : undefined
    if (seen === undefined && observations.lookup(exec.agent, root, key)?.stale) {
      // a write of a file that is not there now may create it (create-only at write time, as for an unread path)
      if (role === 'edit' || (file !== undefined && (await exists(file)) === true)) {
        return { kind: 'deny', reason: `a command has run since you last looked at "${key}", so it may have changed — read it again, then retry` }
      }
      return
    }

    if (role === 'edit') {
      if (seen === undefined) return { kind: 'deny', reason: `${exec.name} requires reading "${key}" first — read it, then retry` }
      if (seen === ABSENT) {
        return {
          kind: 'deny',
          reason: `"${key}" did not exist when you looked, so there is nothing to edit — create it with write, or read it again if it exists now`,
        }
      }
    } else if (seen === undefined || seen === ABSENT) {
      if (file === undefined || (await exists(file)) !== true) return
      if (seen === undefined) return { kind: 'deny', reason: `${exec.name} would replace "${key}", which you have not read — read it first, then retry` }
      return { kind: 'deny', reason: `"${key}" was created since you saw it absent — read it first, then retry` }
    }
    // observed at a version: an early freshness check when the version is a content hash we can recompute
    if (file !== undefined && seen.startsWith('sha256:')) {
      const now = await versionOf(file)
      if (now !== undefined && now !== seen) return { kind: 'deny', reason: `"${key}" changed since you read it — read it again, then retry` }
    }
  })

  // the write-time half: the version the file must still be at when the tool commits
  ctx.on('fs/expected-version', (exec, rel) => {
    const role = roleOf(exec)
    if ((role !== 'write' && role !== 'edit') || !governs(exec)) return
    const root = rootOf(exec)
    const key = pathKey(root, rel)
    if (key === undefined) return ABSENT
    // never observed or observed absent: the write may only create
    return observations.get(exec.agent, root, key) ?? ABSENT
  })
}

/** starting it reaches no network and writes nothing (faber replay starts it as it is) */
export const replay = 'inert'

/** the plugin as one object, for `ctx.plugin(FsObservation, config)` with a default import */
export default { name, inject, reusable, Config, apply, replay }
