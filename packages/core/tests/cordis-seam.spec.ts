import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'
import { ADAPTERS, importCycles, internalsReaders, workspaceFiles } from './structure.ts'

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..')

// besides the adapters: the inspector's own specs check what it reports against cordis' registry, and this spec's
// patterns are written down in structure.ts
const ALSO = [/^plugins\/tool-cordis\/tests\//, /^packages\/core\/tests\/structure\.ts$/]

describe('the cordis seam', () => {
  // cordis' internals are read in the adapters only, so a cordis upgrade touches those files
  it('only the adapters read cordis internals: sources, tests, benchmarks, examples and scripts', () => {
    const readers = internalsReaders(root, workspaceFiles(root)).filter(
      (reader) => !ADAPTERS.includes(reader.file) && !ALSO.some((allowed) => allowed.test(reader.file)),
    )
    expect(readers.map(({ file, reads }) => `${file} (${reads})`)).to.deep.equal([])
  })

  it('core has no import cycles, type-only imports included', () => {
    expect(importCycles(join(root, 'packages/core/src'))).to.deep.equal([])
  })

  it('the cycle check sees type-only imports, re-exports and dynamic imports', () => {
    expect(importCycles(join(root, 'packages/core/tests/fixtures/cycle'))).to.deep.equal(['a.ts → b.ts → c.ts → a.ts', 'self.ts → self.ts'])
  })
})
