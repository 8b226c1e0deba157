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

const isPlugin = (value: unknown) =>
  typeof value === 'function' || (typeof value === 'object' && value !== null && typeof (value as { apply?: unknown }).apply === 'function')

/**
 * what a plugin says it does in a replay (its `replay` member), or undefined when it says nothing; throws a TypeError
 * saying what is wrong when what it says is none of the three (a replay must not guess)
 */
export function replayRole(plugin: unknown): ReplayRole | undefined {
  if ((typeof plugin !== 'object' && typeof plugin !== 'function') || plugin === null) return
  const role = (plugin as { replay?: unknown }).replay
  if (role === undefined || role === 'inert' || role === 'omit') return role
  if (typeof role === 'object' && role !== null && 'plugin' in role) {
    const { plugin: standIn, config } = role as { plugin: unknown; config?: unknown }
    if (!isPlugin(standIn)) throw new TypeError('its replay stand-in (replay.plugin) is not a plugin: a function, or an object with an apply method')
    if (config !== undefined && typeof config !== 'function') throw new TypeError('its replay.config is not a function of the config')
    return role as ReplayRole
  }
  const shown = typeof role === 'string' ? `"${role}"` : typeof role
  throw new TypeError(`it says replay: ${shown}, which is none of 'inert', 'omit' or { plugin, config? }`)
}
