import { readFileSync } from 'node:fs'

/**
 * the source of the function that builds `tools`, `console` and `ToolCallError` inside a program's realm.
 * evaluated, it yields `setup(bridge, toolNamesJson, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, programSource, sharedFlatJson?, sharedCalls?, recordedJson?)`
 * returning `{ start, deliver, refuseImport }`; `programSource` is `wrapProgram(code)`, which locates a failed call;
 * `sharedFlatJson` and `sharedCalls`, when given, are a `flatJson` and a `makeCalls` made of `flatJsonText` and `callsText`
 * elsewhere (the isolate's driver, the worker's context of its own).
 */
export const preludeSource = readFileSync(new URL('./prelude-script.js', import.meta.url), 'utf8')

/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export const wrapProgram = (code: string) => `(async function (tools, console) {\n${code}\n})`

// the text of one of the prelude's `const <name> = ` blocks, up to its end line: code a backend makes once where V8 optimizes
// it once (a context of the isolate's or worker's own), in place of the prelude's own copy in every run's fresh context
const block = (name: string, end: string) => {
  const from = preludeSource.indexOf(`const ${name} = `)
  const to = preludeSource.indexOf(`\n  // ${end}`, from)
  if (from < 0 || to < from) throw new Error(`the prelude has no ${name} to share`)
  return preludeSource.slice(from, to)
}

/**
 * the text of the prelude's `flatJson` (the common argument's JSON without a walk), for a backend that makes one of its own
 * where V8 optimizes it once: it binds the builtins it calls from the realm it is evaluated in, and reads only
 * `objectPrototype` (the program realm's) from its scope
 */
export const flatJsonText = `const { keys, getPrototypeOf, getOwnPropertySymbols, getOwnPropertyDescriptor, hasOwn } = Object
  const { stringify } = JSON
  const isFiniteNumber = Number.isFinite
  ${block('flatJson', 'flat-json end')}`

/**
 * the text of the prelude's `makeCalls` (the calls a run has waiting on the host: their slots, ids and promises), for a
 * backend that makes one of its own where V8 optimizes it once, and hands it to the prelude as `sharedCalls`. it binds
 * the builtins it calls from the realm it is evaluated in; what it makes for the program comes of the Promise and parse
 * of the program's realm, which the prelude hands it
 */
export const callsText = `const { defineProperty } = Object
  const $floor = Math.floor
  const $min = Math.min
  ${block('makeCalls', 'calls end')}`

/** what a worker running worker.mjs is handed in its workerData besides its lanes: the prelude and the texts it makes once */
export const workerTexts = Object.freeze({ prelude: preludeSource, flatJson: flatJsonText, calls: callsText })
