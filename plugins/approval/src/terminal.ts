// the terminal answerer: one prompt at a time on a TTY, showing the tool, its arguments and, for a call made inside
// run_code, the program. without a TTY it does not answer, so the request ends unavailable unless another answerer
// takes it. when a program already reads the terminal line by line (the chat of `faber run`), it shares its line
// reader with `shareTerminal`, so the answer is read there and never reaches the program as input of its own.

import type { Readable, Writable } from 'node:stream'
import { defineConfig, waitOnPerson } from '@faber/core'
import { type Context, Schema } from 'cordis'
import type { ElicitationAnswer, ElicitationContent, ElicitationField, ElicitationQuery } from './elicit.ts'
import { fieldProblem } from './elicit.ts'
import type { ApprovalAnswer, ApprovalQuery } from './index.ts'

type Input = Readable & { isTTY?: boolean }
type Output = Writable & { isTTY?: boolean }

// control characters could move the cursor or recolour the prompt: show them instead of sending them
function visible(text: string) {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`)
}

function clip(text: string, max: number) {
  return text.length > max ? `${text.slice(0, max)}… (${text.length - max} more characters)` : text
}

/** asks one question on a terminal someone else reads: the next line typed, or undefined when cancelled or closed */
export type AskLine = (question: string, signal: AbortSignal) => Promise<string | undefined>

const SHARED = Symbol.for('faber.approval.terminal')
const CTRL_C = '\x03'

/** lets the terminal answerer ask its questions through `ask` while the returned disposer is not called */
export function shareTerminal(input: NodeJS.ReadableStream, ask: AskLine): () => void {
  const holder = input as { [SHARED]?: AskLine }
  holder[SHARED] = ask
  return () => {
    if (holder[SHARED] === ask) delete holder[SHARED]
  }
}

/**
 * the next line typed, or undefined when the input ends or the request is abandoned. a terminal in raw mode sends
 * Enter as `\r` and Ctrl-C as `\x03` (which abandons the question); what is typed is echoed there.
 */
function readLine(input: Input, signal: AbortSignal, output: Output): Promise<string | undefined> {
  return new Promise((resolve) => {
    let buffer = ''
    const done = (line: string | undefined) => {
      input.off('data', onData)
      input.off('end', onEnd)
      input.off('close', onEnd)
      signal.removeEventListener('abort', onAbort)
      input.pause()
      resolve(line)
    }
    const raw = (input as { isRaw?: boolean }).isRaw === true
    const onData = (chunk: Buffer | string) => {
      const text = chunk.toString()
      if (text.includes(CTRL_C)) return done(CTRL_C)
      if (raw) output.write(text.replace(/\r/g, '\r\n'))
      buffer += text
      const end = buffer.search(/[\r\n]/)
      if (end >= 0) done(buffer.slice(0, end))
    }
    const onEnd = () => done(undefined)
    const onAbort = () => done(undefined)
    if (input.readableEnded || input.destroyed || signal.aborted) return done(undefined)
    input.on('data', onData)
    input.once('end', onEnd)
    input.once('close', onEnd)
    signal.addEventListener('abort', onAbort, { once: true })
    input.resume()
  })
}

const CHOICES: Record<string, ApprovalAnswer> = {
  y: { decision: 'allow' },
  yes: { decision: 'allow' },
  s: { decision: 'allow', remember: 'session' },
  session: { decision: 'allow', remember: 'session' },
  a: { decision: 'allow', remember: 'always' },
  always: { decision: 'allow', remember: 'always' },
  n: { decision: 'reject' },
  no: { decision: 'reject' },
}

export const name = 'approval-terminal'
export const inject = ['approval']
export const reusable = false

export interface Config {
  input?: Input
  output?: Output
  maxArgumentChars: number
  maxProgramLines: number
}

/** what a deployer writes: every key optional */
export type ConfigInput = Partial<Config>

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    input: Schema.any().description('a readable stream; process.stdin by default'),
    output: Schema.any().description('a writable stream; process.stdout by default'),
    maxArgumentChars: Schema.natural().default(2000).description('longer arguments are cut'),
    maxProgramLines: Schema.natural().default(40).description('longer programs are cut'),
  }),
)

export function apply(ctx: Context, config: Config) {
  const input: Input = config.input ?? process.stdin
  const output: Output = config.output ?? process.stdout
  if (!input.isTTY || !output.isTTY) {
    ctx
      .logger('approval')
      .warn('the terminal answerer needs a TTY on its input and output; it will not answer, so approval requests it would get are unavailable')
    return
  }
  let turn: Promise<unknown> = Promise.resolve()

  const render = (query: ApprovalQuery, always: boolean) => {
    const who = query.agent ? `agent "${query.agent.name}"` : 'the model'
    const lines = ['', `── approval needed ── ${who} wants to call ${query.tool}`, `reason: ${visible(query.reason)}`, 'arguments:']
    const args = clip(JSON.stringify(query.arguments, null, 2), config.maxArgumentChars)
    lines.push(...args.split('\n').map((line) => `  ${line}`))
    if (query.program !== undefined) {
      const program = query.program.split('\n')
      lines.push(`inside run_code (call ${query.callId}), program:`)
      lines.push(...program.slice(0, config.maxProgramLines).map((line) => `  | ${visible(line)}`))
      if (program.length > config.maxProgramLines) lines.push(`  | … (${program.length - config.maxProgramLines} more lines)`)
    }
    const options = ['[y] allow once', '[s] allow for this session', ...(always ? ['[a] always allow'] : []), '[n] reject']
    return `${lines.join('\n')}\n${options.join('  ')}: `
  }

  /** asks line by line through the chat's reader when one is shared, else on the terminal itself */
  const asker = (signal: AbortSignal): ((text: string) => Promise<string | undefined>) => {
    const shared = (input as { [SHARED]?: AskLine })[SHARED]
    if (shared) return (text) => shared(text, signal)
    // whatever was typed before the question is not an answer to it
    while (input.read() !== null);
    return (text) => {
      output.write(text)
      return readLine(input, signal, output)
    }
  }

  const prompt = async (query: ApprovalQuery): Promise<ApprovalAnswer | undefined> => {
    if (query.signal.aborted) return
    const always = (ctx.approval as { persistent?: boolean }).persistent === true
    const question = render(query, always)
    const ask = asker(query.signal)
    for (let text = question; ; text = `please answer ${always ? 'y, s, a or n' : 'y, s or n'}: `) {
      const line = await ask(text)
      if (line === undefined || line === CTRL_C) {
        const why = query.signal.aborted
          ? '(the call was cancelled; no answer needed)'
          : line === CTRL_C
            ? '(Ctrl-C: not answered)'
            : '(input closed; not answered)'
        output.write(`\n${why}\n`)
        return
      }
      const choice = line.trim().toLowerCase()
      const answer = choice === 'a' || choice === 'always' ? (always ? CHOICES[choice] : undefined) : CHOICES[choice]
      if (answer) {
        output.write(`→ ${answer.decision === 'allow' ? `allowed${answer.remember ? ` (${answer.remember})` : ' once'}` : 'rejected'}\n`)
        return answer
      }
    }
  }

  // a person answers here: the program that made the call stops its wall clock until they did (queued prompts too)
  ctx.on('approval/request', (query) => {
    const answered = waitOnPerson(query.exec)
    const answer = turn.then(() => prompt(query)).finally(answered)
    turn = answer.catch(() => {})
    return answer
  })

  // a form (an imported MCP server asking): fill it in field by field, Enter keeps the default
  const form = async (query: ElicitationQuery): Promise<ElicitationAnswer | undefined> => {
    if (query.signal.aborted) return
    const ask = asker(query.signal)
    const head = ['', `── ${visible(query.source)} asks ──`, ...visible(query.message).split('\n')]
    if (query.during?.length) head.push(`(while calling ${query.during.join(', ')})`)
    let line = await ask(`${head.join('\n')}\n[y] answer  [n] decline  [c] cancel: `)
    for (;;) {
      if (line === undefined || line === CTRL_C) {
        output.write(`\n${query.signal.aborted ? '(withdrawn; no answer needed)' : '(not answered)'}\n`)
        return line === CTRL_C ? { action: 'cancel', note: 'Ctrl-C at the terminal' } : undefined
      }
      const choice = line.trim().toLowerCase()
      if (choice === 'n' || choice === 'no') return { action: 'decline' }
      if (choice === 'c' || choice === 'cancel') return { action: 'cancel' }
      if (choice === 'y' || choice === 'yes') break
      line = await ask('please answer y, n or c: ')
    }
    const content: ElicitationContent = {}
    for (const [name, field] of Object.entries(query.schema.properties ?? {})) {
      const required = query.schema.required?.includes(name) === true
      for (let text = fieldQuestion(name, field, required); ; text = `  ${text.trimStart()}`) {
        const typed = await ask(text)
        if (typed === undefined || typed === CTRL_C) {
          output.write('\n(not answered)\n')
          return typed === CTRL_C ? { action: 'cancel', note: 'Ctrl-C at the terminal' } : undefined
        }
        if (typed.trim() === '' && (field.default !== undefined || !required)) break
        const value = fieldValue(field, typed.trim())
        const problem = fieldProblem(field, value)
        if (problem === undefined) {
          content[name] = value as string | number | boolean
          break
        }
        output.write(`  ${problem}\n`)
      }
    }
    output.write('→ answered\n')
    return { action: 'accept', content }
  }

  ctx.on('approval/elicit', (query) => {
    const answered = waitOnPerson(...(query.calls ?? []))
    const answer = turn.then(() => form(query)).finally(answered)
    turn = answer.catch(() => {})
    return answer
  })
}

function fieldQuestion(name: string, field: ElicitationField, required: boolean) {
  const choices = field.enum ?? field.oneOf?.map((choice) => choice.const)
  const kind = choices ? choices.join(' | ') : field.type === 'boolean' ? 'y/n' : field.type
  const about = field.title || field.description ? ` — ${visible(field.title ?? field.description ?? '')}` : ''
  const fallback = field.default !== undefined ? ` [${String(field.default)}]` : required ? '' : ' [skip]'
  return `  ${visible(name)} (${kind})${about}${fallback}: `
}

function fieldValue(field: ElicitationField, typed: string): unknown {
  if (field.type === 'boolean') return /^(y|yes|true)$/i.test(typed) ? true : /^(n|no|false)$/i.test(typed) ? false : typed
  if (field.type === 'number' || field.type === 'integer') return typed === '' || Number.isNaN(Number(typed)) ? typed : Number(typed)
  return typed
}

/** starting it reaches no network and writes nothing (faber replay starts it as it is) */
export const replay = 'inert'

/** the answerer as one object, for `ctx.plugin(TerminalAnswerer, config)` */
export default { name, inject, reusable, Config, apply, replay }
