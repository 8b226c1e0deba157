// the texts of the code that runs inside a sandbox, read once. plain js, so that a sandbox process loads it on plain
// node; prelude.d.mts says what each is
import { readFileSync } from 'node:fs'

export const preludeSource = readFileSync(new URL('./prelude-script.js', import.meta.url), 'utf8')
export const callsSource = readFileSync(new URL('./calls-script.js', import.meta.url), 'utf8')
export const wrapProgram = (code) => `(async function (tools, console) {\n${code}\n})`
export const workerTexts = Object.freeze({ prelude: preludeSource, calls: callsSource })
