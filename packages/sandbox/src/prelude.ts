import { readFileSync } from 'node:fs'

/**
 * the source of the function that builds `tools`, `console` and `ToolCallError` inside a program's realm.
 * evaluated, it yields `setup(bridge, toolNamesJson, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, programSource)`
 * returning `{ start, deliver, refuseImport }`; `programSource` is `wrapProgram(code)`, which locates a failed call.
 */
export const preludeSource = readFileSync(new URL('./prelude-script.js', import.meta.url), 'utf8')

/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export const wrapProgram = (code: string) => `(async function (tools, console) {\n${code}\n})`
