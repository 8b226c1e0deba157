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
})
