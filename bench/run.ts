// runs every benchmark in bench/ (each module's exported bench* functions) in one process, or those named on the
// command line: `pnpm bench pipeline code-mode`. `--json` prints the collected figures as one JSON object at the end.

import { readdirSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const args = process.argv.slice(2)
const json = args.includes('--json')
const only = args.filter((a) => !a.startsWith('--'))
const files = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && !['run.ts', 'harness.ts'].includes(f) && !f.startsWith('_'))
  .filter((f) => only.length === 0 || only.includes(basename(f, '.ts')))
  .sort()

const figures: Record<string, unknown> = {}
for (const file of files) {
  const module = (await import(join(here, file))) as Record<string, unknown>
  for (const [name, value] of Object.entries(module)) {
    if (!name.startsWith('bench') || typeof value !== 'function') continue
    console.log(`\n# ${file} · ${name}`)
    figures[`${basename(file, '.ts')}.${name}`] = await (value as () => Promise<unknown>)()
  }
}
if (json) console.log(JSON.stringify(figures, null, 2))
// a bench that found what must not happen (fs-race's losses) set process.exitCode; pending handles are not awaited
process.exit()
