// the tiers a deployment chooses between, for a spec that runs a case on each: every backend given, in-process first,
// then in a sandbox process (isolation: 'process')

import type { SandboxService } from '../service.ts'

/** [label ('worker, in-process', 'worker, process tier'), the backend's service, its isolation], backends in the order given */
export type Tier<S> = readonly [label: string, service: S, isolation: SandboxService.Isolation]

export function tiersOf<S>(backends: Record<string, S>): readonly Tier<S>[] {
  const entries = Object.entries(backends)
  return [
    ...entries.map(([name, service]) => [`${name}, in-process`, service, 'in-process'] as const),
    ...entries.map(([name, service]) => [`${name}, process tier`, service, 'process'] as const),
  ]
}
