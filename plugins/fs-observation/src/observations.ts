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

/** per agent, per root and path: the version last observed, or ABSENT */
export class Observations {
  private byAgent = new WeakMap<Agent, Map<string, string>>()
  private agentless = new Map<string, string>()

  private table(agent: Agent | undefined, create: true): Map<string, string>
  private table(agent: Agent | undefined, create?: false): Map<string, string> | undefined
  private table(agent: Agent | undefined, create = false) {
    if (!agent) return this.agentless
    let table = this.byAgent.get(agent)
    if (!table && create) this.byAgent.set(agent, (table = new Map()))
    return table
  }

  get(agent: Agent | undefined, root: string | undefined, key: string): string | undefined {
    return this.table(agent)?.get(`${root ?? ''}\0${key}`)
  }

  set(agent: Agent | undefined, root: string | undefined, key: string, version: string) {
    this.table(agent, true).set(`${root ?? ''}\0${key}`, version)
  }

  clear() {
    this.byAgent = new WeakMap()
    this.agentless.clear()
  }
}
