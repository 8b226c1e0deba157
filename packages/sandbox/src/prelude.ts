import { readFileSync } from 'node:fs'

/**
 * the source of the function that builds `tools`, `console` and `ToolCallError` inside a program's realm.
 * evaluated, it yields `setup(bridge, toolNamesJson, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, programSource, sharedFlatJson?)`
 * returning `{ start, deliver, refuseImport }`; `programSource` is `wrapProgram(code)`, which locates a failed call;
 * `sharedFlatJson`, when given, is a `flatJson` made of `flatJsonText` elsewhere (the isolate's driver).
 */
export const preludeSource = readFileSync(new URL('./prelude-script.js', import.meta.url), 'utf8')

/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export const wrapProgram = (code: string) => `(async function (tools, console) {\n${code}\n})`

/**
 * the text of the prelude's `flatJson` (the common argument's JSON without a walk), for a backend that makes one of its own
 * where V8 optimizes it once: it binds the builtins it calls from the realm it is evaluated in, and reads only
 * `objectPrototype` (the program realm's) from its scope
 */
export const flatJsonText = (() => {
  const from = preludeSource.indexOf('const flatJson = ')
  const to = preludeSource.indexOf('\n  // flat-json end', from)
  if (from < 0 || to < from) throw new Error('the prelude has no flatJson to share')
  return `const { keys, getPrototypeOf, getOwnPropertySymbols, getOwnPropertyDescriptor, hasOwn } = Object
  const { stringify } = JSON
  const isFiniteNumber = Number.isFinite
  ${preludeSource.slice(from, to)}`
})()
