// after `tsc -b tsconfig.build.json`: the files under each package's src/ that tsc does not emit (plain .js/.mjs entries
// of workers and child processes, text read at run time) are copied to dist/ beside the compiled modules that load them.
import { cpSync, existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

const root = new URL('..', import.meta.url).pathname
for (const group of ['packages', 'plugins']) {
  for (const name of readdirSync(join(root, group))) {
    const dir = join(root, group, name)
    if (!existsSync(join(dir, 'tsconfig.build.json'))) continue
    const filter = (path) => {
      if (path.endsWith('.ts')) return false
      // x.js beside x.ts would overwrite the compiled module
      if (/\.js$/.test(path) && existsSync(path.replace(/\.js$/, '.ts'))) throw new Error(`${path} has the name tsc gives ${path.replace(/\.js$/, '.ts')}`)
      return true
    }
    cpSync(join(dir, 'src'), join(dir, 'dist'), { recursive: true, filter })
  }
}
