// agents: named scopes with an optional parent. an agent's context carries the agent, so whatever is
// registered or listened to through it (or through plugins loaded on it) applies to that agent and below.

import type { Context } from 'cordis'

export const kAgent = Symbol.for('faber.agent')
/** the registry's hook for createAgent; not a method users can name */
export const kAddAgent = Symbol('faber.addAgent')

export class Agent {
  /** @internal */ disposed = false
  /** the root agent, ..., this agent */
  readonly lineage: readonly Agent[]

  /** @internal */
  constructor(
    readonly name: string,
    readonly parent: Agent | undefined,
    readonly ctx: Context,
  ) {
    this.lineage = Object.freeze([...(parent?.lineage ?? []), this])
  }

  /** this agent, its parent, ... up to the root agent */
  chain(): Agent[] {
    const chain: Agent[] = []
    for (let agent: Agent | undefined = this; agent; agent = agent.parent) chain.push(agent)
    return chain
  }

  /** true when `ancestor` is this agent or one of its ancestors */
  isWithin(ancestor: Agent): boolean {
    for (let agent: Agent | undefined = this; agent; agent = agent.parent) if (agent === ancestor) return true
    return false
  }

  toString() {
    return `agent "${this.name}"`
  }
}

/** the agent a context belongs to: undefined for the global layer */
export function agentOf(ctx: object): Agent | undefined {
  return (ctx as any)[kAgent]
}

export interface AgentOptions {
  name: string
  parent?: Agent
}

/**
 * makes an agent with its own context; it is disposed with the plugin that created it.
 * requires `ctx.tools` (inject `tools` in the creating plugin).
 */
export function createAgent(ctx: Context, options: AgentOptions): Agent {
  const { name, parent } = options ?? ({} as AgentOptions)
  if (typeof name !== 'string' || !name) throw new TypeError('createAgent: name must be a non-empty string')
  if (parent !== undefined && !(parent instanceof Agent)) throw new TypeError('createAgent: parent must be an Agent made by createAgent')
  if (parent?.disposed) throw new TypeError(`createAgent: parent ${parent} has been disposed`)
  const tools = ctx.get('tools')
  if (!tools) throw new TypeError('createAgent: no ToolRuntime is mounted at ctx.tools; load @faber/core first and inject "tools"')
  const agent: Agent = new Agent(name, parent, undefined as unknown as Context)
  ;(agent as { ctx: Context }).ctx = ctx.extend({ [kAgent]: agent })
  tools[kAddAgent](agent)
  return agent
}
