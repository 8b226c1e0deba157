// renders a session's events: a readable transcript for people (colored on a TTY), or JSON lines for machines.

import { ModelError, type SessionEvent } from '@faber/agent'
import { messageOf, type ToolResult } from '@faber/core'
import { Spinner, type Style, visible } from './style.ts'

export interface TranscriptOptions {
  json?: boolean
  /** lines of a tool result shown before "…" (default 8) */
  maxLines?: number
  /** show the program text of run_code calls (default true) */
  showCode?: boolean
  /** every nested call on its own lines, also on a terminal (piped output always has them) */
  verbose?: boolean
}

/** the nested calls of one running program */
interface Program {
  started: number
  done: number
  running: number
  failed: number
}

const count = (n: number) => n.toLocaleString('en-US')
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

function clip(text: string, maxLines: number, width = 150): string[] {
  const lines = visible(text)
    .split('\n')
    .map((l) => (l.length > width ? `${l.slice(0, width - 1)}…` : l))
  if (lines.length <= maxLines) return lines
  return [...lines.slice(0, maxLines), `… (${lines.length - maxLines} more lines)`]
}

function args(text: string, width = 110) {
  const flat = visible(text.replace(/\s+/g, ' '))
  return flat.length > width ? `${flat.slice(0, width - 1)}…` : flat
}

/** a JSON-safe form of a result, for --json */
export function resultJson(result: ToolResult) {
  return result.isError
    ? {
        isError: true,
        code: result.error.code,
        message: result.error.message,
        deniedBy: result.error.deniedBy,
        withheldBy: result.error.withheldBy,
        content: result.content,
        trace: result.trace,
      }
    : { isError: false, content: result.content, trace: result.trace }
}

export class Transcript {
  readonly spinner: Spinner
  private streaming = false
  private maxLines: number
  /** on a terminal, without --verbose: a program's nested calls fold into one live progress line */
  private fold: boolean
  private programs = new Map<string, Program>()

  constructor(
    private out: NodeJS.WritableStream & { isTTY?: boolean },
    private style: Style,
    private options: TranscriptOptions = {},
  ) {
    this.spinner = new Spinner(process.stderr)
    this.maxLines = options.maxLines ?? 8
    this.fold = Boolean(out.isTTY) && !options.verbose && !options.json
  }

  private progress = () => {
    let done = 0
    let running = 0
    let failed = 0
    let started = Number.POSITIVE_INFINITY
    for (const p of this.programs.values()) {
      done += p.done
      running += p.running
      failed += p.failed
      started = Math.min(started, p.started)
    }
    const elapsed = Number.isFinite(started) ? seconds(performance.now() - started) : ''
    return `run_code: ${count(done)} nested call(s) done · ${count(running)} running · ${count(failed)} failed · ${elapsed}`
  }

  /** a line of the transcript (or, with --json, a JSON record) */
  line(text = '') {
    this.spinner.stop()
    this.out.write(`${text}\n`)
  }

  json(record: Record<string, unknown>) {
    this.out.write(`${JSON.stringify(record)}\n`)
  }

  heading(text: string) {
    if (this.options.json) return
    this.line()
    this.line(this.style.paint(`── ${text} `.padEnd(72, '─'), 'bold', 'cyan'))
  }

  note(text: string) {
    if (this.options.json) return
    for (const l of text.split('\n')) this.line(this.style.paint(l, 'gray'))
  }

  event(event: SessionEvent) {
    if (this.options.json) return this.jsonEvent(event)
    const { paint } = this.style
    switch (event.type) {
      case 'turn-start':
        this.line()
        this.line(`${paint('you ›', 'bold', 'blue')} ${event.user}`)
        break
      case 'model-start':
        this.spinner.start(`the model is thinking (step ${event.step})`)
        break
      case 'text':
        if (!this.streaming) {
          this.spinner.stop()
          this.out.write(`${paint('model ›', 'bold', 'magenta')} `)
          this.streaming = true
        }
        this.out.write(visible(event.delta))
        break
      case 'retry': {
        const { retry } = event
        // 529 is Anthropic's "overloaded": a person reading only the number would not know it is the provider's load
        const overloaded = retry.status === 529 ? ' (the provider is overloaded)' : ''
        const reason = retry.status ? `${retry.status} from the model${overloaded}` : `the model request failed: ${retry.reason}`
        const wait = retry.delayMs >= 1000 ? `${Math.round(retry.delayMs / 100) / 10} s` : `${Math.round(retry.delayMs)} ms`
        if (this.streaming) this.out.write('\n')
        this.streaming = false
        this.line(paint(`  ${reason}; retrying in ${wait} (attempt ${retry.attempt} of ${retry.maxAttempts})`, 'yellow'))
        this.spinner.start(`the model is thinking (step ${event.step}, attempt ${retry.attempt} of ${retry.maxAttempts})`)
        break
      }
      case 'model-end': {
        if (this.streaming) this.out.write('\n')
        this.streaming = false
        this.spinner.stop()
        const usage = event.response.usage ? `${event.response.usage.totalTokens} tokens, ` : ''
        this.line(paint(`  (step ${event.step}: ${usage}${event.response.toolCalls.length} tool call(s), ${Math.round(event.durationMs)} ms)`, 'gray'))
        break
      }
      case 'call-start': {
        const { call } = event
        let parsed: { code?: unknown; description?: unknown } | undefined
        try {
          parsed = call.name === 'run_code' ? JSON.parse(call.arguments) : undefined
        } catch {}
        if (parsed && typeof parsed.code === 'string') {
          this.line(`${paint('  → run_code', 'bold', 'yellow')} ${paint(String(parsed.description ?? ''), 'italic')}`)
          if (this.options.showCode !== false) for (const l of visible(parsed.code).split('\n')) this.line(paint(`    │ ${l}`, 'gray'))
        } else {
          this.line(
            `${paint(`  → ${call.name}`, 'bold', 'yellow')}${paint(`(${args(call.arguments)})`, 'gray')}${event.mode === 'parallel' ? paint('  ∥', 'gray') : ''}`,
          )
        }
        if (call.name === 'run_code') this.programs.set(call.id, { started: performance.now(), done: 0, running: 0, failed: 0 })
        this.spinner.start(this.fold && call.name === 'run_code' ? this.progress : `running ${call.name}`)
        break
      }
      case 'nested-start': {
        const program = this.programs.get(event.event.outerCallId)
        if (program) program.running++
        if (this.fold) {
          if (program && !this.spinner.active) this.spinner.start(this.progress)
          break
        }
        const site = event.event.site ? paint(`  line ${event.event.site.line}`, 'gray') : ''
        this.line(
          `${paint('    ↳', 'cyan')} ${paint(`tools.${event.event.name}`, 'cyan')}${paint(`(${args(JSON.stringify(event.event.arguments), 90)})`, 'gray')}${site}`,
        )
        break
      }
      case 'nested-end': {
        const { result, name, durationMs, outerCallId, arguments: callArgs } = event.event
        const program = this.programs.get(outerCallId)
        if (program) {
          program.running = Math.max(0, program.running - 1)
          program.done++
          if (result.isError) program.failed++
        }
        if (!this.fold) {
          this.line(`${paint('    ↲', 'cyan')} ${this.outcome(name, result)} ${paint(`${Math.round(durationMs)} ms`, 'gray')}`)
        } else if (result.isError) {
          // failures are kept on a terminal: the progress line stands for the calls that went well
          this.line(
            `${paint('    ↲', 'cyan')} ${this.outcome(name, result)}${paint(`(${args(JSON.stringify(callArgs), 70)})`, 'gray')} ${paint(args(result.error.message, 90), 'red')}`,
          )
          this.spinner.start(this.progress)
        }
        break
      }
      case 'approval': {
        const d = event.detail as { tool?: string; outcome?: string; answeredBy?: string; reason?: string; nested?: boolean }
        const tool = d.tool ?? 'a call'
        if (event.event === 'approval/asked')
          this.line(`${paint('    ?', 'magenta')} ${paint(`approval asked for ${tool}`, 'magenta')}${paint(` (${d.reason ?? ''})`, 'gray')}`)
        else {
          const outcome = d.outcome ?? 'decided'
          this.line(
            `${paint('    ?', 'magenta')} ${paint(`approval ${outcome}`, outcome === 'allowed' ? 'green' : 'red')}${d.answeredBy ? paint(` (answered by ${d.answeredBy})`, 'gray') : ''}`,
          )
        }
        break
      }
      case 'call-end': {
        const program = this.programs.get(event.call.id)
        this.programs.delete(event.call.id)
        if (program?.done) {
          const ok = program.done - program.failed
          this.line(
            paint(
              `    ${count(program.done)} nested call(s): ${count(ok)} ok, ${count(program.failed)} failed, ${seconds(performance.now() - program.started)}`,
              'cyan',
            ),
          )
        }
        this.line(`  ${this.outcome(event.call.name, event.result)} ${paint(`${Math.round(event.durationMs)} ms`, 'gray')}`)
        for (const l of clip(event.result.content, this.maxLines)) this.line(paint(`    ${l}`, event.result.isError ? 'red' : 'gray'))
        if (this.fold && this.programs.size) this.spinner.start(this.progress)
        break
      }
      case 'turn-end': {
        const { outcome } = event
        this.streaming = false
        this.spinner.stop()
        const usage = outcome.usage ? `, ${outcome.usage.totalTokens} tokens` : ''
        this.line(paint(`  (turn ${outcome.turn} ${outcome.reason}: ${outcome.steps} model call(s)${usage})`, 'gray'))
        break
      }
    }
  }

  /**
   * a turn that failed: one message on stderr, as every expected failure of the command (`heading: what went wrong`);
   * the transcript on stdout only marks a streamed answer as partial, and --json adds an `error` record for machines
   */
  failure(error: unknown, heading: string) {
    const message = messageOf(error)
    const partial = error instanceof ModelError ? error.partial : undefined
    this.spinner.stop()
    if (this.options.json) this.json({ type: 'error', message, ...(partial !== undefined ? { partial } : {}) })
    else {
      if (this.streaming) this.out.write('\n')
      if (partial) this.line(this.style.paint('  (the answer above is partial: the model stopped sending)', 'gray'))
    }
    this.streaming = false
    process.stderr.write(`${heading}: ${visible(message)}\n`)
  }

  private outcome(name: string, result: ToolResult) {
    const { paint } = this.style
    if (!result.isError) return `${paint('✓', 'green')} ${name}`
    const who = result.error.deniedBy ?? result.error.withheldBy
    const by = who ? ` by ${who.plugin} (${who.stage})` : ''
    return `${paint('✗', 'red')} ${name} ${paint(`${result.error.code}${by}`, 'red', 'bold')}`
  }

  private jsonEvent(event: SessionEvent) {
    switch (event.type) {
      case 'text':
      case 'model-start':
        return
      case 'call-end':
        return this.json({ type: 'call-end', turn: event.turn, call: event.call, durationMs: event.durationMs, result: resultJson(event.result) })
      case 'nested-start': {
        const { agent, ...rest } = event.event
        return this.json({ type: 'nested-start', turn: event.turn, ...rest, agent: agent?.name })
      }
      case 'nested-end': {
        const { agent, result, ...rest } = event.event
        return this.json({ type: 'nested-end', turn: event.turn, ...rest, agent: agent?.name, result: resultJson(result) })
      }
      default:
        return this.json(event as unknown as Record<string, unknown>)
    }
  }
}
