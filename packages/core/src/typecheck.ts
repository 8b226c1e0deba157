// the optional pre-run type-check: the program is checked against the SDK declarations with the TypeScript
// compiler, and its diagnostics become the tool result instead of a run. loaded only when the flag is on.

import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type * as TS from 'typescript'

const require = createRequire(import.meta.url)
let ts: typeof TS | undefined
const libraries = new Map<string, TS.SourceFile>()

const PRELUDE = `
interface Console { log(...args: unknown[]): void; info(...args: unknown[]): void; warn(...args: unknown[]): void; error(...args: unknown[]): void; debug(...args: unknown[]): void }
`

function load(): typeof TS {
  if (ts) return ts
  try {
    ts = require('typescript') as typeof TS
  } catch {
    throw new Error('run_code type-checking is on but the "typescript" package is not installed; install typescript or turn typecheck off')
  }
  return ts
}

const HEAD = 'async function __faber_program(tools: Tools, console: Console) {'

/** diagnostics as `line L, column C: message` (positions in the program as written); empty when it checks */
export function typecheckProgram(program: string, sdk: string): string[] {
  const ts = load()
  const options: TS.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2022.d.ts'],
    strict: true,
    noEmit: true,
    types: [],
    skipLibCheck: true,
  }
  const libDir = dirname(require.resolve('typescript/lib/lib.d.ts'))
  const files: Record<string, string> = {
    '/sdk.d.ts': `${PRELUDE}\n${sdk}\ntype Tools = typeof tools\n`,
    '/program.ts': `${HEAD}\n${program}\n}\nexport {}\n`,
  }
  const host: TS.CompilerHost = {
    getSourceFile(name, languageVersion) {
      if (files[name] !== undefined) return ts.createSourceFile(name, files[name], languageVersion, true)
      let cached = libraries.get(name)
      if (!cached) {
        const text = ts.sys.readFile(name)
        if (text === undefined) return undefined
        cached = ts.createSourceFile(name, text, languageVersion, true)
        libraries.set(name, cached)
      }
      return cached
    },
    getDefaultLibFileName: () => join(libDir, 'lib.es2022.d.ts'),
    getDefaultLibLocation: () => libDir,
    writeFile: () => {},
    getCurrentDirectory: () => '/',
    getDirectories: () => [],
    fileExists: (name) => files[name] !== undefined || ts.sys.fileExists(name),
    readFile: (name) => files[name] ?? ts.sys.readFile(name),
    getCanonicalFileName: (name) => name,
    useCaseSensitiveFileNames: () => true,
    getNewLine: () => '\n',
  }
  const built = ts.createProgram(['/sdk.d.ts', '/program.ts'], options, host)
  const diagnostics = [...built.getSyntacticDiagnostics(), ...built.getSemanticDiagnostics()]
  return diagnostics.map((d) => {
    const text = ts.flattenDiagnosticMessageText(d.messageText, '\n')
    if (!d.file || d.start === undefined) return text
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start)
    const where = d.file.fileName === '/program.ts' ? `line ${line}, column ${character + 1}` : `${d.file.fileName} line ${line + 1}`
    return `${where}: ${text}`
  })
}
