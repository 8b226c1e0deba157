// a replay report for a terminal: each changed call under its session and turn (nested calls under their run_code,
// with the program line), old → new with the stage and plugin that decided, then the summary.

import type { Decision, ReplayedCall, ReplayReport, Verdict } from './replay.ts'
import { type Color, type Style, visible } from './style.ts'

const COLORS: Record<Verdict, Color> = { allow: 'green', deny: 'red', ask: 'cyan', unknown: 'magenta', error: 'gray' }
const MARKS: Record<Verdict, string> = { allow: '+', deny: '-', ask: '?', unknown: '!', error: '~' }

/** text a log or a deployment gave, on one line of the report: its control characters, line breaks included, shown, not sent */
const shown = (text: string | number) => visible(String(text)).replaceAll('\n', '\\x0a')

function verdict(style: Style, decision: Decision) {
  return style.paint(decision.verdict, COLORS[decision.verdict], 'bold')
}

function decider(decision: Decision) {
  if (!decision.stage) return ''
  return shown(decision.plugin && decision.plugin !== decision.stage ? `${decision.stage} (${decision.plugin})` : decision.stage)
}

function change(style: Style, call: ReplayedCall, indent: string): string[] {
  const mark = style.paint(MARKS[call.new.verdict], COLORS[call.new.verdict], 'bold')
  const lines = [
    `${indent}${mark} ${style.paint(shown(call.name), 'bold')} ${style.paint(shown(call.arguments), 'dim')}`,
    `${indent}    ${verdict(style, call.old)} → ${verdict(style, call.new)}${call.new.stage ? ` by ${decider(call.new)}` : ''}`,
  ]
  if (call.new.reason) lines.push(`${indent}    ${style.paint(shown(call.new.reason), 'dim')}`)
  else if (call.old.reason && call.new.verdict === 'allow') lines.push(`${indent}    ${style.paint(`was: ${shown(call.old.reason)}`, 'dim')}`)
  if (call.notReached) lines.push(`${indent}    ${style.paint(`its ${call.notReached} recorded nested call(s) would not be reached`, 'yellow')}`)
  return lines
}

function counts(tally: { newlyDenied: number; newlyAllowed: number; newlyAsked: number }) {
  const parts = []
  if (tally.newlyDenied) parts.push(`${tally.newlyDenied} newly denied`)
  if (tally.newlyAllowed) parts.push(`${tally.newlyAllowed} newly allowed`)
  if (tally.newlyAsked) parts.push(`${tally.newlyAsked} newly asked`)
  return parts.join(', ')
}

/** the report as text; `style` paints it (no colour when piped) */
export function renderReplay(report: ReplayReport, style: Style): string {
  const out: string[] = []
  const { summary } = report
  const logs = report.logs.length
  out.push(style.paint(`faber replay: ${summary.replayed} call(s) from ${logs} log(s) through ${shown(report.deployment)}`, 'bold'))
  for (const log of report.logs) {
    const notes = []
    if (log.truncated) notes.push(`its last line (line ${log.truncated.line}, ${log.truncated.bytes} bytes) was cut short and left out`)
    const unknown = Object.entries(log.unknownRecords)
    if (unknown.length) notes.push(`passed over record types it does not know: ${unknown.map(([type, n]) => `${shown(type)} ×${n}`).join(', ')}`)
    if (notes.length) out.push(style.paint(`  ${shown(log.path)}: ${notes.join('; ')}`, 'yellow'))
  }
  let place = ''
  let outer = ''
  for (const call of report.changes) {
    const here = `${call.log}\0${call.session}\0${call.turn}`
    if (here !== place) {
      place = here
      outer = ''
      out.push('', style.paint(`session ${shown(call.session)} · turn ${shown(call.turn)}${call.agent ? ` · agent ${shown(call.agent)}` : ''}`, 'blue'))
    }
    if (call.within) {
      if (call.within.callId !== outer) {
        outer = call.within.callId
        out.push(`  ${style.paint(`in run_code ${shown(outer)}`, 'dim')}`)
      }
      if (call.within.line !== undefined) {
        out.push(`    ${style.paint(`line ${shown(call.within.line)}${call.within.source ? `: ${shown(call.within.source)}` : ''}`, 'gray')}`)
      }
      out.push(...change(style, call, '    '))
    } else {
      outer = ''
      out.push(...change(style, call, '  '))
    }
  }
  out.push('')
  const headline = `${summary.replayed} replayed, ${summary.unchanged} unchanged${summary.changed ? `, ${summary.changed} changed` : ''}`
  const detail = counts(summary)
  out.push(`${style.paint('Summary:', 'bold')} ${headline}${detail ? ` (${detail})` : ''}`)
  if (summary.unknown) out.push(`  ${style.paint(`${summary.unknown} call(s) of tools or agents this deployment does not have`, 'magenta')}`)
  if (summary.unrecorded) out.push(`  ${summary.unrecorded} call(s) without a recorded result (the session stopped mid-step): not replayed`)
  if (summary.notReached) out.push(`  ${summary.notReached} nested call(s) not reached (their run_code is refused)`)
  const tools = Object.entries(summary.byTool).filter(([, t]) => t.changed)
  if (tools.length) out.push(`  by tool: ${tools.map(([name, t]) => `${shown(name)} ${counts(t) || `${t.changed} changed`}`).join('; ')}`)
  const plugins = Object.entries(summary.byPlugin)
  if (plugins.length) {
    const text = plugins.map(
      ([name, p]) => `${shown(name)} ${[p.denied ? `${p.denied} denied` : '', p.asked ? `${p.asked} asked` : ''].filter(Boolean).join(', ')}`,
    )
    out.push(`  by plugin: ${text.join('; ')}`)
  }
  out.push(
    report.morePermissive
      ? style.paint('More permissive: a call that was refused would now run (exit code 1).', 'yellow', 'bold')
      : style.paint('Nothing became more permissive.', 'green'),
  )
  return out.join('\n')
}
