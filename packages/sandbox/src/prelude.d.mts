// the types of prelude.mjs
/**
 * prelude-script.js: evaluated in a program's realm, it yields `setup(bridge, toolNamesJson, outputBytes, bufferBytes,
 * argumentBytes, maxPendingCalls, shared, recordedJson?)`, which builds `tools`, `console` and `ToolCallError` and
 * returns `{ start, deliver, refuseImport }`: `start(main)` runs the compiled program, `deliver(call, ok, text, code?)`
 * hands in a reply (`text` its JSON when `ok`, else its message)
 */
export declare const preludeSource: string
/** calls-script.js: a script whose value, `{ flatJson, makeCalls }`, is the prelude's `shared`, evaluated by the backend */
export declare const callsSource: string
/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export declare const wrapProgram: (code: string) => string
/** what a worker running worker.mjs is handed in its workerData besides its lanes */
export declare const workerTexts: Readonly<{ prelude: string; calls: string }>
