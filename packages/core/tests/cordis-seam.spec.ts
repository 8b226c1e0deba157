import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

// cordis' internals are read in two adapters only, so a cordis upgrade touches two files
const ADAPTERS = ['packages/core/src/cordis.ts', 'plugins/tool-cordis/src/cordis-adapter.ts']
const INTERNALS = [
  /\b_hooks\b/,
  /\.tracker\b/,
  /\bscope\??\.runtime\b/,
  /\bsymbols\b/,
  /\bregistry\??\.(values|entries|get|keys)\(/,
  /\bruntime\??\.children\b/,
  /\bfilterHooks\b/,
  /\bContext\.internal\b/,
]

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..')

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sources(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

describe('the cordis seam', () => {
  it('only the adapters read cordis internals', () => {
    const readers: string[] = []
    for (const group of ['packages', 'plugins']) {
      for (const pkg of readdirSync(join(root, group))) {
        let files: string[]
        try {
          files = sources(join(root, group, pkg, 'src'))
        } catch {
          continue
        }
        for (const file of files) {
          const path = relative(root, file)
          if (ADAPTERS.includes(path)) continue
          const text = readFileSync(file, 'utf8')
          const hit = INTERNALS.find((pattern) => pattern.test(text))
          if (hit) readers.push(`${path} (${hit.source})`)
        }
      }
    }
    expect(readers).to.deep.equal([])
  })

  it('core has no import cycles, type-only imports included', () => {
    const dir = join(root, 'packages/core/src')
    const imports = new Map<string, string[]>()
    for (const file of readdirSync(dir).filter((name) => name.endsWith('.ts'))) {
      const text = readFileSync(join(dir, file), 'utf8')
      imports.set(
        file,
        [...text.matchAll(/(?:from |import\()'\.\/([\w-]+\.ts)'/g)].map((match) => match[1]),
      )
    }
    const cycles: string[] = []
    const visit = (file: string, path: string[]) => {
      for (const next of imports.get(file) ?? []) {
        if (path.includes(next)) cycles.push([...path.slice(path.indexOf(next)), next].join(' → '))
        else visit(next, [...path, next])
      }
    }
    for (const file of imports.keys()) visit(file, [file])
    expect(cycles).to.deep.equal([])
  })
})
