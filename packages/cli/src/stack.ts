// the standard plugin stack of `faber chat` and `faber demo`: one line per plugin, in load order.

import type { PluginSpec } from './deployment.ts'

export interface StackOptions {
  /** the workspace the fs tools work in */
  root: string
  /** the approval plugin's config (the demo answers by rules) */
  approval: Record<string, unknown>
  /** ask the person at the terminal what no rule answers */
  terminal?: boolean
}

const plugin = (use: string, config: unknown = {}): PluginSpec => ({ key: use, use, config })

export function standardStack({ root, approval, terminal }: StackOptions): PluginSpec[] {
  return [
    plugin('@faber/sandbox'),
    plugin('@faber/plugin-tools-fs', { root }),
    plugin('@faber/plugin-fs-observation'),
    plugin('@faber/plugin-guards', { paths: [{ tools: ['read', 'write', 'edit', 'list', 'glob', 'grep'], roots: [root] }] }),
    plugin('@faber/plugin-approval', approval),
    ...(terminal ? [plugin('@faber/plugin-approval#TerminalAnswerer')] : []),
    plugin('@faber/plugin-tool-cordis'),
  ]
}
