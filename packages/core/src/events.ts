// events that pass between packages which do not depend on each other: an agent loop (@faber/agent's) and the
// policies that keep per-turn or per-session state; file tools (tools-fs) and the freshness policy (fs-observation).
// each is declared here once: cordis merges `Events` declarations silently, so two copies could drift apart unnoticed.

import type { Agent } from './agent.ts'
import type { Execution } from './tool.ts'

export interface TurnInfo {
  /** the agent whose user turn began; undefined for a loop without an agent */
  agent?: Agent
  turn: number
}

export interface SessionInfo {
  agent?: Agent
  /** the session log's id; the same when a session is resumed */
  id: string
  resumed: boolean
}

export interface SessionEndInfo {
  agent?: Agent
  id: string
}

export interface ConversationEndInfo {
  /** the agent that served the conversation */
  agent?: Agent
  /** the `session` its calls carried (`exec.session`) */
  session: string
}

declare module 'cordis' {
  interface Events {
    /** a user turn starts; per-turn policy state (repeat-call breakers, rate limits) resets on it */
    'agent/turn'(info: TurnInfo): void
    /**
     * a session with a log starts (`resumed: false`) or continues one (`resumed: true`, same `id`): plugins that keep
     * per-session state (fs-observation's record of reads) key it by `id`, so a resumed session gets it back
     */
    'agent/session'(info: SessionInfo): void
    /** the session was disposed: plugins end what belongs to it (tools-shell's background jobs of its agent) */
    'agent/session-end'(info: SessionEndInfo): void
    /**
     * one of the conversations an agent serves at once ended (an MCP client went away): per-conversation state kept
     * for the `session` its calls carried (breaker streaks, session grants) can go
     */
    'tools/session-end'(info: ConversationEndInfo): void
    /**
     * asked by a file tool (tools-fs' write and edit) just before it commits: the version the file must still be at
     * (ABSENT: it must not exist), or nothing for an unconditional write. `path` is relative to the tool's root, which
     * the tool carries as `exec.tool.annotations.fsRoot`. @faber/plugin-fs-observation answers it.
     */
    'fs/expected-version'(exec: Execution, path: string): string | undefined | void | Promise<string | undefined | void>
    /**
     * asked by @faber/plugin-fs-observation's pre-execute check before it looks at the disk: the version of the file
     * at the absolute `file` (ABSENT: it does not exist; `{}`: unknown, the tool decides), or nothing to let it read
     * the disk. `faber replay` answers it from the recorded calls, not from the disk of today
     */
    'fs/disk-version'(file: string): { version?: string } | undefined | void
    /**
     * told by `faber replay` before it replays a recorded call of a tool the deployment does not have: a replay
     * stand-in (see ReplayRole) whose real plugin would have registered it registers it now, from the name alone
     */
    'replay/tool'(name: string, agent?: Agent): void
  }
}
