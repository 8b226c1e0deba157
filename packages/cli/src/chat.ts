// the interactive chat of `faber run` and `faber chat`: one user turn per line. on a TTY it prompts and Ctrl-C aborts
// the running turn (a second Ctrl-C, or Ctrl-C at the prompt, leaves); piped, it runs every input line as a turn, a
// failed one included, and exits 1 if any failed (as xargs goes on past a failed command).

import { createInterface } from 'node:readline'
import { AgentSession, type Model, SessionLog } from '@faber/agent'
import { type AskLine, shareTerminal } from '@faber/plugin-approval'
import type { Deployed } from './deployment.ts'
import type { Style } from './style.ts'
import { Transcript } from './transcript.ts'

export interface ChatOptions {
  model: Model
  style: Style
  json?: boolean
  /** every nested call on its own lines, also on a terminal */
  verbose?: boolean
  input?: NodeJS.ReadableStream & { isTTY?: boolean }
  output?: NodeJS.WritableStream & { isTTY?: boolean }
  /** what a failed turn's message on stderr starts with (default `faber`) */
  command?: string
  /** default persona and context when the deployment gives none */
  persona?: string
  context?: string
}

export const DEFAULT_PERSONA =
  'You are a careful software engineering agent. Inspect before you change anything, make the smallest change that does the job, and say what you changed.'

/** runs the chat until the input ends; resolves with the process exit code */
export async function chat(deployed: Deployed, options: ChatOptions): Promise<number> {
  const input = options.input ?? process.stdin
  const output = options.output ?? process.stdout
  const interactive = Boolean(input.isTTY)
  const transcript = new Transcript(output, options.style, { json: options.json, verbose: options.verbose })
  const { spec } = deployed
  const log = spec.session.log ? await SessionLog.open(spec.session.log) : undefined
  if (log?.truncated) transcript.note(`(the session log's last line was cut short by a crash and was skipped: line ${log.truncated.line})`)
  const session = new AgentSession(deployed.ctx, {
    model: options.model,
    agent: deployed.agent,
    persona: spec.session.persona ?? options.persona ?? DEFAULT_PERSONA,
    context: spec.session.context ?? options.context,
    maxSteps: spec.session.maxSteps,
    log,
    onEvent: (event) => {
      if (event.type === 'turn-start' && interactive && !options.json) return
      transcript.event(event)
    },
  })
  if (log?.resumed) transcript.note(`(continuing the session in ${log.path}: ${session.turn} turn(s) so far)`)
  const { paint } = options.style
  const prompt = paint('you › ', 'bold', 'blue')
  const lines = createInterface({ input, output: interactive ? output : undefined, terminal: interactive, prompt })
  const queue: string[] = []
  let wake: (() => void) | undefined
  let closed = false
  let leaving = false
  let running: AbortController | undefined
  let exitCode = 0
  // an approval question asked through this chat: while it is open, the next line answers it and is not a user turn
  let question: ((line: string | undefined) => void) | undefined

  const leave = () => {
    leaving = true
    running?.abort(new Error('the user left'))
    question?.(undefined)
    lines.close()
  }
  const ask: AskLine = (text, signal) =>
    new Promise((resolve) => {
      if (signal.aborted || closed) return resolve(undefined)
      transcript.spinner.hold()
      const cut = text.lastIndexOf('\n') + 1
      output.write(text.slice(0, cut))
      const finish = (line: string | undefined) => {
        signal.removeEventListener('abort', cancel)
        question = undefined
        transcript.spinner.release()
        lines.setPrompt(prompt)
        resolve(line)
      }
      const cancel = () => finish(undefined)
      signal.addEventListener('abort', cancel, { once: true })
      question = finish
      lines.setPrompt(text.slice(cut))
      lines.prompt()
    })
  const release = interactive ? shareTerminal(input, ask) : () => {}

  // one turn, which Ctrl-C aborts; a failed one is said on stderr and makes the exit code 1
  const turn = async (run: (signal: AbortSignal) => Promise<unknown>) => {
    running = new AbortController()
    try {
      await run(running.signal)
    } catch (error) {
      transcript.failure(error, `${options.command ?? 'faber'}: turn ${session.turn} failed`)
      exitCode = 1
    } finally {
      running = undefined
    }
  }

  lines.on('line', (raw) => {
    const text = raw.trim()
    // on a terminal /exit leaves at once, whatever is running or asking; piped, it ends the input where it stands
    if (interactive && (text === '/exit' || text === '/quit')) return leave()
    if (question) return question(raw)
    queue.push(raw)
    wake?.()
  })
  lines.on('close', () => {
    closed = true
    question?.(undefined)
    wake?.()
  })
  lines.on('SIGINT', () => {
    if (running && !running.signal.aborted) {
      transcript.note('\n(cancelling the turn; Ctrl-C again to leave)')
      running.abort(new Error('cancelled by the user'))
    } else {
      leave()
    }
  })
  try {
    if (interactive) {
      transcript.note(
        `model ${options.model.name}${deployed.agent ? `, agent "${deployed.agent.name}"` : ''}, mode ${deployed.ctx.tools.modeFor(deployed.agent)}. /exit leaves.`,
      )
      if (!session.checkpointed.length) lines.prompt()
    }
    // a program the session's last turn checkpointed while it waited on a person: run again before any new turn
    if (session.checkpointed.length) {
      transcript.note(`(the last turn's program was waiting on a person when the session stopped: running it again from ${log?.path})`)
      await turn((signal) => session.resume({ signal }))
      if (interactive && !leaving) lines.prompt()
    }
    while (!leaving) {
      const raw = queue.shift()
      if (raw === undefined) {
        if (closed) break
        await new Promise<void>((resolve) => (wake = resolve))
        wake = undefined
        continue
      }
      const text = raw.trim()
      if (text === '/exit' || text === '/quit') break
      if (text) await turn((signal) => session.send(text, { signal }))
      if (interactive && !leaving) lines.prompt()
    }
  } finally {
    release()
    lines.close()
    session.dispose()
    await log?.close()
  }
  return exitCode
}
