// type stripping for run_code programs: swc's strip-only mode replaces types with spaces, so every line and column of
// the program stays where the model wrote it. @swc/wasm-typescript is the engine amaro (node's own stripper) wraps, the
// same version, without amaro's engines field of node >= 22 (bench/strip.ts compares them, and ts-blank-space).

import { transformSync } from '@swc/wasm-typescript'

const HEAD = 'async function __faber_program(tools, console) {'

export type Stripped = { ok: true; code: string } | { ok: false; message: string; line?: number; column?: number }

export function stripTypes(source: string): Stripped {
  // the program is a function body: top-level return and await only parse inside a function
  const wrapped = `${HEAD}\n${source}\n}`
  let output: string
  try {
    output = transformSync(wrapped, { mode: 'strip-only' }).code
  } catch (error) {
    return describe(error, source)
  }
  const lines = output.split('\n')
  if (lines[0] !== HEAD || lines.at(-1) !== '}') return { ok: false, message: 'the program must be a function body; it closed the wrapping function early' }
  return { ok: true, code: lines.slice(1, -1).join('\n') }
}

function describe(error: unknown, source: string): Stripped {
  const { message = String(error), startLine, startColumn } = error as { message?: string; startLine?: number; startColumn?: number }
  // the wrapper adds one line before the program
  let line = typeof startLine === 'number' && startLine > 1 ? startLine - 1 : undefined
  let column = line !== undefined && typeof startColumn === 'number' ? startColumn + 1 : undefined
  // and one after it: a program that ends too early fails on the wrapper's closing line, which is the program's end
  const lines = source.split('\n')
  let end = ''
  if (line !== undefined && line > lines.length) {
    line = lines.length
    column = lines[line - 1].length + 1
    end = ' (the end of the program)'
  }
  const where = line !== undefined ? ` at line ${line}${column !== undefined ? `, column ${column}` : ''}${end}` : ''
  const hint = /enum|namespace/i.test(message) ? '; use plain objects and functions instead' : ''
  return { ok: false, message: `the program does not parse${where}: ${message}${hint}`, line, column }
}
