// the program-side prelude's texts, read once. plain js (its types are in prelude.d.mts), so that a sandbox process
// loads it on plain node
import { readFileSync } from 'node:fs'

/**
 * the source of the function that builds `tools`, `console` and `ToolCallError` inside a program's realm.
 * evaluated, it yields `setup(bridge, toolNamesJson, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, shared, recordedJson?)`
 * returning `{ start, deliver, refuseImport }`; `shared` is what `callsSource` answered, evaluated by the backend
 */
export const preludeSource = readFileSync(new URL('./prelude-script.js', import.meta.url), 'utf8')

/**
 * the source of the calls a run has waiting on the host (their slots, ids and promises) and of the common argument's
 * JSON: a script whose value is `{ flatJson, makeCalls }`, which a backend evaluates whole, where V8 optimizes it once
 * (a context of its own), and hands to the prelude's `setup` as `shared`
 */
export const callsSource = readFileSync(new URL('./calls-script.js', import.meta.url), 'utf8')

/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export const wrapProgram = (code) => `(async function (tools, console) {\n${code}\n})`

/** what a worker running worker.mjs is handed in its workerData besides its lanes: the prelude and the calls' script */
export const workerTexts = Object.freeze({ prelude: preludeSource, calls: callsSource })
