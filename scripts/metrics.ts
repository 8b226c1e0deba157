// the structural figures of issue 14, before and after, as a markdown table: @faber/core's exported names, the source
// files that read cordis internals, import cycles in core, lines of src per package, and `duplicates` pairs.
//   pnpm metrics [BEFORE] [AFTER]   (default: c8adb76, the tree issue 14 was filed against, and HEAD)
// each revision is read from git into a temporary directory, so the working tree is not measured, and both are
// measured the same way by the same code.

import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { exportedNames, importCycles, internalsReaders, sourceFiles } from '../packages/core/tests/structure.ts'

const [before = 'c8adb76', after = 'HEAD'] = process.argv.slice(2)

interface Figures {
  rev: string
  exports: { values: string[]; types: string[] }
  readers: string[]
  cycles: string[]
  lines: Map<string, number>
  files: number
  pairs: string
}

function measure(rev: string): Figures {
  const dir = mkdtempSync(join(tmpdir(), 'faber-metrics-'))
  try {
    execFileSync('bash', ['-c', `git archive ${JSON.stringify(rev)} | tar -x -C ${JSON.stringify(dir)}`])
    const lines = new Map<string, number>()
    for (const file of sourceFiles(dir)) {
      const pkg = file.split('/').slice(0, 2).join('/')
      lines.set(pkg, (lines.get(pkg) ?? 0) + readFileSync(join(dir, file), 'utf8').split('\n').length - 1)
    }
    const duplicates = execFileSync('duplicates', ['--repo', dir, '--most', '1', '--seconds', '120'], { encoding: 'utf8' })
    return {
      rev: execFileSync('git', ['rev-parse', '--short', rev], { encoding: 'utf8' }).trim(),
      exports: exportedNames(join(dir, 'packages/core/src/index.ts')),
      readers: internalsReaders(dir).map((reader) => reader.file),
      cycles: importCycles(join(dir, 'packages/core/src')),
      lines,
      files: readdirSync(dir, { recursive: true }).length,
      pairs: duplicates.split('\n')[0],
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const a = measure(before)
const b = measure(after)
const gone = (x: string[], y: string[]) => x.filter((name) => !y.includes(name))
const names = (f: Figures) => f.exports.values.length + f.exports.types.length

const rows: [string, string, string][] = [
  [
    '@faber/core exported names (values + types)',
    `${names(a)} (${a.exports.values.length} + ${a.exports.types.length})`,
    `${names(b)} (${b.exports.values.length} + ${b.exports.types.length})`,
  ],
  ['src files reading cordis internals', `${a.readers.length}`, `${b.readers.length}`],
  ['import cycles in core (type-only included)', `${a.cycles.length}`, `${b.cycles.length}`],
]
const packages = [...new Set([...a.lines.keys(), ...b.lines.keys()])].sort()
for (const pkg of packages) rows.push([`lines of src: ${pkg}`, `${a.lines.get(pkg) ?? 0}`, `${b.lines.get(pkg) ?? 0}`])
const total = (f: Figures) => [...f.lines.values()].reduce((sum, n) => sum + n, 0)
rows.push(['lines of src: all packages', `${total(a)}`, `${total(b)}`])
rows.push([
  '`duplicates` pairs (whole tree)',
  a.pairs.replace(/ of places.*?\(/, ' (').replace(/\).*/, ')'),
  b.pairs.replace(/ of places.*?\(/, ' (').replace(/\).*/, ')'),
])

console.log(`| | before (${a.rev}) | after (${b.rev}) |`)
console.log('|---|---|---|')
for (const [label, x, y] of rows) console.log(`| ${label} | ${x} | ${y} |`)
console.log()
console.log(`exported names gone: ${gone([...a.exports.values, ...a.exports.types], [...b.exports.values, ...b.exports.types]).join(', ') || 'none'}`)
console.log(`exported names new: ${gone([...b.exports.values, ...b.exports.types], [...a.exports.values, ...a.exports.types]).join(', ') || 'none'}`)
console.log(`files reading cordis internals before: ${a.readers.join(', ') || 'none'}`)
console.log(`files reading cordis internals after: ${b.readers.join(', ') || 'none'}`)
console.log(`import cycles in core before: ${a.cycles.join('; ') || 'none'}`)
console.log(`import cycles in core after: ${b.cycles.join('; ') || 'none'}`)
