// what each agent has observed of the file system: a path read or written at a version, or seen absent.

import path from 'node:path'
import type { Agent } from '@faber/core'

/** an observation of a path that did not exist; also the expectation "must not exist" in the tools' contract */
export const ABSENT = 'absent'

/**
 * the key of a path: lexical, relative to the root, `/`-separated, the way @faber/plugin-tools-fs reports paths.
 * undefined when the path lies outside the root. without a root, the normalized path itself.
 */
export function pathKey(root: string | undefined, input: string): string | undefined {
  if (root === undefined) return path.posix.normalize(input.replaceAll('\\', '/')).replace(/(.)\/$/, '$1')
  const rel = path.relative(root, path.resolve(root, input))
  if (rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel)) return
  return rel.split(path.sep).join('/') || '.'
}

/** what is known of a path: the version last observed (or ABSENT), and whether a command has run since */
export interface Observed {
  version: string
  /** a command ran after this observation was made, so it no longer vouches for the file */
  stale: boolean
}

/**
 * per agent, per root and path: the version last observed, or ABSENT. a command that may change any file
 * (`commandRan`) makes every observation made before it stale, for every agent: observations carry the command
 * epoch they were made in, so nothing has to be walked.
 */
export class Observations {
  private byAgent = new WeakMap<Agent, Map<string, { version: string; epoch: number }>>()
  private agentless = new Map<string, { version: string; epoch: number }>()
  /** how many commands have run; an observation made in an earlier epoch is stale */
  epoch = 0

  private table(agent: Agent | undefined, create: true): Map<string, { version: string; epoch: number }>
  private table(agent: Agent | undefined, create?: false): Map<string, { version: string; epoch: number }> | undefined
  private table(agent: Agent | undefined, create = false) {
    if (!agent) return this.agentless
    let table = this.byAgent.get(agent)
    if (!table && create) this.byAgent.set(agent, (table = new Map()))
    return table
  }

  /** the version observed, when a command has not run since; see `lookup` for stale ones too */
  get(agent: Agent | undefined, root: string | undefined, key: string): string | undefined {
    const entry = this.lookup(agent, root, key)
    return entry && !entry.stale ? entry.version : undefined
  }

  lookup(agent: Agent | undefined, root: string | undefined, key: string): Observed | undefined {
    const entry = this.table(agent)?.get(`${root ?? ''}\0${key}`)
    return entry && { version: entry.version, stale: entry.epoch < this.epoch }
  }

  /** records an observation; `epoch` is the one the observing call started in (a command may have run since) */
  set(agent: Agent | undefined, root: string | undefined, key: string, version: string, epoch = this.epoch) {
    this.table(agent, true).set(`${root ?? ''}\0${key}`, { version, epoch })
  }

  /** a command ran: nothing observed before now vouches for any file */
  commandRan() {
    this.epoch++
  }

  clear() {
    this.byAgent = new WeakMap()
    this.agentless.clear()
  }
}
