// the types of prelude.mjs
/** the source of the function that builds `tools`, `console` and `ToolCallError` inside a program's realm (prelude.mjs) */
export declare const preludeSource: string
/** the source of the calls a run has waiting on the host and of the common argument's JSON (prelude.mjs) */
export declare const callsSource: string
/** the wrapper that makes a program the body of `async function (tools, console)`; compile it with `lineOffset: -1` */
export declare const wrapProgram: (code: string) => string
/** what a worker running worker.mjs is handed in its workerData besides its lanes: the prelude and the calls' script */
export declare const workerTexts: Readonly<{ prelude: string; calls: string }>
