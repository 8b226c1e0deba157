// the one check of what a program reports through an untyped channel (contract.ts). plain js (its types are in
// report.d.mts), so that a sandbox process loads it on plain node

const refusals = new Set(['argument', 'buffers', 'waiting'])
const failures = new Set(['exception', 'timeout', 'memory', 'output-limit', 'abort', 'crash'])
// a line or column of a program: a whole number from 1 (a stack the program wrote itself may name any other)
const isPosition = (value) => Number.isSafeInteger(value) && value >= 1

/**
 * `(kind, a, b, c, d)`: the prelude's call, log, done, throw, limit and memory, and a unit's failure from a sandbox
 * process, handed on to `reports` (contract.ts ProgramReports) when it is well formed. `d` is a call's site (the
 * prelude's), or the unit's heap for an end. it answers as the prelude expects: true for a call taken or a line logged
 */
export function report(reports, kind, a, b, c, d) {
  if (reports.ended()) return false
  const number = typeof d === 'number' ? d : undefined
  switch (kind) {
    case 'call':
      if (typeof a !== 'number' || typeof b !== 'string' || typeof c !== 'string') return false
      reports.call(a, b, c, number)
      return !reports.ended()
    case 'log':
      return typeof a === 'string' && reports.log(a)
    case 'done':
      reports.done(typeof a === 'string' ? a : undefined, number)
      return true
    case 'throw': {
      // both or neither: a position with an impossible part (Infinity, which a json channel makes null) is none
      const at = isPosition(b) && isPosition(c)
      reports.threw(typeof a === 'string' ? a : 'the program threw', at ? b : undefined, at ? c : undefined, number)
      return true
    }
    case 'limit':
      reports.overOutput()
      return true
    case 'memory':
      reports.refused(refusals.has(a) ? a : 'buffers')
      return true
    case 'failed':
      if (!failures.has(a) || typeof b !== 'string') return false
      reports.failed(a, b)
      return true
    case 'values': {
      if (typeof a !== 'string') return false
      let values
      try {
        values = JSON.parse(a)
      } catch {
        return false
      }
      // finite: '[1e999]' parses to Infinity, which a checkpoint's json would keep as null
      if (!Array.isArray(values) || !values.every((value) => Number.isFinite(value))) return false
      reports.values(values)
      return true
    }
  }
  return false
}
