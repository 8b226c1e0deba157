// the seed's invariant, in one place: what a model-direct call may name under each mode. the executor, the wire
// view and the code-only prompt section all ask this predicate; nothing else decides it.

import { RUN_CODE } from './tool.ts'

export type Mode = 'native' | 'code' | 'both'

/** the one predicate: a model-direct call under effective Code Mode may only name run_code */
export function collapses(name: string, mode: Mode, nested: boolean): boolean {
  return !nested && mode === 'code' && name !== RUN_CODE
}

/** the names a program may bind (and the SDK declares): every tool but the run_code transport itself */
export function bindable(name: string): boolean {
  return name !== RUN_CODE
}
