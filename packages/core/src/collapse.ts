// the seed's invariant, in one place: what a model-direct call may name under each mode. the executor, the wire
// view and the code-only prompt section all ask this predicate; nothing else decides it.

import { RUN_CODE } from './tool.ts'

export type Mode = 'native' | 'code' | 'both'

/** the one predicate: a model-direct call under effective Code Mode may only name run_code */
export function collapses(name: string, mode: Mode, nested: boolean): boolean {
  return !nested && mode === 'code' && name !== RUN_CODE
}
