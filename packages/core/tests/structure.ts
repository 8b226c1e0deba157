// how the codebase is put together, read from its text: which files read cordis 3.18's internals, how core's modules
// import each other, and what @faber/core exports. shared by core's structure specs and scripts/metrics.ts.

import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import ts from 'typescript'

/** the only source files allowed to read cordis' internals */
// core's cordis adapter, its reader of the plugin registry (whether every plugin is in force), and the inspector's
export const ADAPTERS = ['packages/core/src/cordis.ts', 'packages/core/src/health.ts', 'plugins/tool-cordis/src/cordis-adapter.ts']

export const INTERNALS = [
  /\b_hooks\b/,
  /\.tracker\b/,
  /\bscope\??\.runtime\b/,
  /\bsymbols\b/,
  /\bregistry\??\.(values|entries|get|keys)\(/,
  /\bruntime\??\.children\b/,
  /\bfilterHooks\b/,
  /\bContext\.internal\b/,
]

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return ['node_modules', 'dist'].includes(entry.name) ? [] : tsFiles(path)
    return /\.m?ts$/.test(entry.name) ? [path] : []
  })
}

/** every `src` file of the workspace's packages and plugins, relative to `root` */
export function sourceFiles(root: string): string[] {
  return ['packages', 'plugins'].flatMap((group) =>
    readdirSync(join(root, group)).flatMap((pkg) => {
      try {
        return tsFiles(join(root, group, pkg, 'src')).map((file) => relative(root, file))
      } catch {
        return []
      }
    }),
  )
}

/** every TypeScript file of the workspace outside node_modules and dist: sources, tests, benchmarks, examples, scripts */
export function workspaceFiles(root: string): string[] {
  const groups = ['packages', 'plugins', 'bench', 'examples', 'test', 'scripts']
  return groups.flatMap((group) => {
    try {
      return tsFiles(join(root, group)).map((file) => relative(root, file))
    } catch {
      return []
    }
  })
}

/** the files (by default every `src` file) that read a cordis internal, each with the first pattern it matches */
export function internalsReaders(root: string, files = sourceFiles(root)): { file: string; reads: string }[] {
  return files.flatMap((file) => {
    const hit = INTERNALS.find((pattern) => pattern.test(readFileSync(join(root, file), 'utf8')))
    return hit ? [{ file, reads: hit.source }] : []
  })
}

/**
 * the import cycles among the modules of `dir`, type-only imports, re-exports and dynamic imports included: each
 * strongly connected group of modules (or a module importing itself), as `a.ts → b.ts → a.ts`
 */
export function importCycles(dir: string): string[] {
  const files = tsFiles(dir)
  const edges = new Map<string, string[]>()
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true)
    const targets = importedFiles
      .map((ref) => ref.fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) => resolve(dirname(file), name))
    edges.set(
      file,
      targets.filter((target) => edges.has(target) || files.includes(target)),
    )
  }
  // Tarjan's strongly connected components
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const cycles: string[] = []
  const visit = (file: string) => {
    index.set(file, index.size)
    low.set(file, index.get(file)!)
    stack.push(file)
    for (const next of edges.get(file) ?? []) {
      if (!index.has(next)) {
        visit(next)
        low.set(file, Math.min(low.get(file)!, low.get(next)!))
      } else if (stack.includes(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!))
    }
    if (low.get(file) !== index.get(file)) return
    const group: string[] = []
    let member: string
    do {
      member = stack.pop()!
      group.unshift(member)
    } while (member !== file)
    if (group.length > 1 || edges.get(file)!.includes(file)) cycles.push([...group, group[0]].map((path) => relative(dir, path)).join(' → '))
  }
  for (const file of files) if (!index.has(file)) visit(file)
  return cycles
}

/**
 * the names a module entry exports, as the TypeScript compiler sees them: `values` exist at run time (functions,
 * classes, constants, `default`), `types` only for the compiler (interfaces, type aliases, and anything exported with
 * `export type`). packages it imports need not be installed: they only widen types, not the list of names.
 */
export function exportedNames(entry: string): { values: string[]; types: string[] } {
  const program = ts.createProgram([entry], {
    noEmit: true,
    allowImportingTsExtensions: true,
    module: ts.ModuleKind.Preserve,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    target: ts.ScriptTarget.ES2022,
    skipLibCheck: true,
    types: [],
  })
  const checker = program.getTypeChecker()
  const module = checker.getSymbolAtLocation(program.getSourceFile(entry)!)!
  const values: string[] = []
  const types: string[] = []
  for (const symbol of checker.getExportsOfModule(module)) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol
    const typeOnly = (symbol.declarations ?? []).some(
      (declaration) => (ts.isExportSpecifier(declaration) && (declaration.isTypeOnly || declaration.parent.parent.isTypeOnly)) || isTypeStar(declaration),
    )
    ;(target.flags & ts.SymbolFlags.Value && !typeOnly ? values : types).push(symbol.name)
  }
  return { values: values.sort(), types: types.sort() }
}

// `export type * from` leaves no alias of its own: the declaration is the original one, reached through a type-only star
function isTypeStar(declaration: ts.Declaration): boolean {
  return ts.isExportDeclaration(declaration) && declaration.isTypeOnly
}
