// how a plugin takes part in `faber replay`. a replay composes a deployment to run recorded calls through its policy
// and must write nothing and reach no network; what a plugin does when it starts is known only to its author, so each
// plugin says it, and a replay refuses a deployment with a plugin that does not

/**
 * - `'inert'`: starting it reaches no network and writes nothing (its tools' bodies may: a replay never runs them)
 * - `'omit'`: it only observes or exports (spans, a live view) and decides nothing: a replay leaves it out
 * - `{ plugin, config }`: what a replay starts in its place, given the plugin's config as `config` maps it: a stand-in
 *   that reaches nothing, registering the tools the real one would (for instance from the names the log recorded,
 *   told through the `replay/tool` event)
 */
export type ReplayRole = 'inert' | 'omit' | { plugin: unknown; config?(config: any): unknown }

/** what a plugin says it does in a replay (its `replay` member), or undefined when it says nothing */
export function replayRole(plugin: unknown): ReplayRole | undefined {
  if ((typeof plugin !== 'object' && typeof plugin !== 'function') || plugin === null) return
  const role = (plugin as { replay?: unknown }).replay
  if (role === 'inert' || role === 'omit') return role
  if (typeof role === 'object' && role !== null && 'plugin' in role) return role as ReplayRole
}
