import { type Agent, canonicalJson, defineConfig, type Execution, type ExecutionToken, type Json, RUN_CODE } from '@faber/core'
import { type Context, Schema } from 'cordis'
import { Breaker } from './breaker.ts'
import { type JsonPath, parseJsonPath, selectJson } from './json-path.ts'
import { isInside, resolveReal } from './paths.ts'
import { nameMatcher } from './patterns.ts'
import { RateLimiter } from './rate.ts'
import { timeoutWrapper } from './timeout.ts'

export * from './json-path.ts'
export * from './paths.ts'
export * from './patterns.ts'
export { TimeoutError, timeoutWrapper } from './timeout.ts'

// the state of calls made without an agent
const NO_AGENT = {}

function slotOf(agent: Agent | undefined): object {
  return agent ?? NO_AGENT
}

/**
 * where a conversation's state is kept: an agent loop's conversation is its agent; the conversations of an agent
 * that serves several (MCP sessions, named by exec.session) each get a slot of their own until they end
 */
function conversations() {
  const sessions = new Map<string, object>()
  return {
    of(exec: Execution): object {
      if (exec.session === undefined) return slotOf(exec.agent)
      let slot = sessions.get(exec.session)
      if (!slot) sessions.set(exec.session, (slot = {}))
      return slot
    },
    end: (session: string) => sessions.delete(session),
  }
}

function textOf(value: Json): string {
  return typeof value === 'string' ? value : value !== null && typeof value === 'object' ? canonicalJson(value) : String(value)
}

function quote(text: string, max = 120) {
  return JSON.stringify(text.length > max ? `${text.slice(0, max)}…` : text)
}

interface CompiledDeny {
  name: string
  matches(tool: string): boolean
  argument?: { text: string; path: JsonPath; pattern: RegExp }
  reason: string
}

interface CompiledPaths {
  name: string
  matches(tool: string): boolean
  arguments: { text: string; path: JsonPath }[]
  roots: string[]
  base: string
  reason: string
}

function compileDeny(rule: DenyRule, index: number): CompiledDeny {
  const name = rule.name || `deny[${index}]`
  if ((rule.argument === undefined) !== (rule.pattern === undefined)) {
    throw new TypeError(`guards: rule "${name}" needs both argument (a JSON path such as "$.command") and pattern (a regular expression), or neither`)
  }
  if (/[gy]/.test(rule.flags)) throw new TypeError(`guards: rule "${name}": the flags g and y make a pattern stateful; leave them out`)
  let argument: CompiledDeny['argument']
  if (rule.argument !== undefined) {
    try {
      argument = { text: rule.argument, path: parseJsonPath(rule.argument), pattern: new RegExp(rule.pattern!, rule.flags) }
    } catch (error) {
      throw new TypeError(`guards: rule "${name}": ${(error as Error).message}`)
    }
  }
  return { name, matches: nameMatcher(rule.tools), argument, reason: rule.reason }
}

function compilePaths(rule: PathRule, index: number): CompiledPaths {
  const name = rule.name || `paths[${index}]`
  if (!rule.roots.length) throw new TypeError(`guards: path rule "${name}" needs at least one root`)
  return {
    name,
    matches: nameMatcher(rule.tools),
    arguments: rule.arguments.map((text) => ({ text, path: parseJsonPath(text) })),
    roots: rule.roots,
    base: rule.base ?? rule.roots[0],
    reason: rule.reason,
  }
}

function denyRuleReason(rule: CompiledDeny, exec: Execution): string | undefined {
  if (!rule.matches(exec.name)) return
  if (!rule.argument) return `guard rule "${rule.name}" denied "${exec.name}" (the tool name is denied). ${rule.reason}`
  const { text, path, pattern } = rule.argument
  for (const value of selectJson(exec.arguments, path)) {
    const shown = textOf(value)
    if (pattern.test(shown))
      return `guard rule "${rule.name}" denied "${exec.name}": ${text} ${quote(shown)} matches /${pattern.source}/${pattern.flags}. ${rule.reason}`
  }
}

function pathRuleReason(rule: CompiledPaths, exec: Execution): string | undefined {
  if (!rule.matches(exec.name)) return
  const where = `the allowed root${rule.roots.length > 1 ? 's' : ''} ${rule.roots.map((r) => JSON.stringify(r)).join(', ')}`
  const roots = rule.roots.map((root) => resolveReal(root))
  for (const { text, path } of rule.arguments) {
    for (const value of selectJson(exec.arguments, path)) {
      if (typeof value !== 'string') return `guard rule "${rule.name}" denied "${exec.name}": ${text} should be a path string, got ${quote(textOf(value))}`
      let real: string
      try {
        real = resolveReal(value, rule.base)
      } catch (error) {
        return `guard rule "${rule.name}" denied "${exec.name}": ${text} ${quote(value)} could not be resolved (${(error as Error).message})`
      }
      if (!roots.some((root) => isInside(real, root))) {
        return `guard rule "${rule.name}" denied "${exec.name}": ${text} ${quote(value)} resolves to ${quote(real)}, outside ${where}. ${rule.reason}`
      }
    }
  }
}

export const name = 'guards'
export const inject = ['tools']
export const reusable = true

export interface DenyRule {
  name?: string
  tools: string[]
  argument?: string
  pattern?: string
  flags: string
  reason: string
}

export interface PathRule {
  name?: string
  tools: string[]
  arguments: string[]
  roots: string[]
  base?: string
  reason: string
}

export interface RateLimit {
  name?: string
  tools: string[]
  perTurn: number
  perMinute: number
}

export interface Config {
  deny: DenyRule[]
  paths: PathRule[]
  breaker: { remindAfter: number; blockAfter: number }
  rateLimits: RateLimit[]
  timeout: { defaultMs: number; exempt: string[] }
}

/** what a deployer writes: everything optional but a deny rule's reason and a path rule's roots */
export interface ConfigInput {
  deny?: { name?: string; tools?: string[]; argument?: string; pattern?: string; flags?: string; reason: string }[]
  paths?: { name?: string; tools?: string[]; arguments?: string[]; roots: string[]; base?: string; reason?: string }[]
  breaker?: { remindAfter?: number; blockAfter?: number }
  rateLimits?: { name?: string; tools?: string[]; perTurn?: number; perMinute?: number }[]
  timeout?: { defaultMs?: number; exempt?: string[] }
}

const tools = (what: string) => Schema.array(Schema.string()).default(['*']).description(`tool-name patterns (* and ? globs) ${what}`)

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    deny: Schema.array(
      Schema.object({
        name: Schema.string().description('shown in the denial; defaults to deny[index]'),
        tools: tools('this rule applies to'),
        argument: Schema.string().description(
          'a JSON path into the arguments, e.g. $.command; with pattern, the rule denies only when a selected value matches',
        ),
        pattern: Schema.string().description('a regular expression tested against the selected values (non-strings as canonical JSON)'),
        flags: Schema.string().default('').description('regular expression flags, e.g. i'),
        reason: Schema.string().required().description('why, and what to do instead; the model reads it'),
      }),
    )
      .default([])
      .description('calls to deny, by tool name and optionally by an argument'),
    paths: Schema.array(
      Schema.object({
        name: Schema.string().description('shown in the denial; defaults to paths[index]'),
        tools: tools('whose path arguments are checked'),
        arguments: Schema.array(Schema.string()).default(['$.path']).description('JSON paths of the path arguments'),
        roots: Schema.array(Schema.string()).required().description('directories the paths must resolve inside (symlinks and .. resolved)'),
        base: Schema.string().description('what relative paths are relative to; defaults to the first root'),
        reason: Schema.string().default('Use a path inside the allowed roots.').description('what to do instead'),
      }),
    )
      .default([])
      .description('path arguments that must stay inside allowed roots'),
    breaker: Schema.object({
      remindAfter: Schema.natural().default(3).description('identical calls in a row after which a reminder is attached to the result (0: never)'),
      blockAfter: Schema.natural().default(5).description('identical calls in a row from which the call is blocked (0: never)'),
    })
      .default({ remindAfter: 3, blockAfter: 5 })
      .description('the repeat-call breaker; per conversation (an agent, or an MCP session), reset by a user turn'),
    rateLimits: Schema.array(
      Schema.object({
        name: Schema.string().description('shown in the denial; defaults to rateLimits[index]'),
        tools: tools('this limit counts'),
        perTurn: Schema.natural().default(0).description('calls per user turn (0: no limit)'),
        perMinute: Schema.natural().default(0).description('calls per sliding minute (0: no limit)'),
      }),
    )
      .default([])
      .description('at most so many calls of matching tools: per turn of a conversation, per minute of an agent'),
    timeout: Schema.object({
      defaultMs: Schema.natural().default(0).description('a time budget for tools that declare no timeoutMs (0: none)'),
      exempt: Schema.array(Schema.string())
        .default([RUN_CODE])
        .description('tools the default does not apply to (run_code has its own wall-clock limit, and its nested calls may wait for approval)'),
    }).default({ defaultMs: 0, exempt: [RUN_CODE] }),
  }),
)

export function apply(ctx: Context, config: Config) {
  const denyRules = config.deny.map(compileDeny)
  const pathRules = config.paths.map(compilePaths)
  const { remindAfter, blockAfter } = config.breaker
  if (remindAfter && blockAfter && blockAfter <= remindAfter) {
    throw new TypeError(`guards: breaker.blockAfter (${blockAfter}) must be greater than breaker.remindAfter (${remindAfter}), or 0 to never block`)
  }
  const rateRules = config.rateLimits.map((limit, index) => {
    const name = limit.name || `rateLimits[${index}]`
    if (!limit.perTurn && !limit.perMinute) throw new TypeError(`guards: rate limit "${name}" sets neither perTurn nor perMinute`)
    return { name, matches: nameMatcher(limit.tools), perTurn: limit.perTurn, perMinute: limit.perMinute }
  })
  const breaker = new Breaker()
  const limiter = new RateLimiter(rateRules, () => Date.now())
  const conversation = conversations()
  const reminders = new WeakMap<ExecutionToken, number>()
  const exempt = nameMatcher(config.timeout.exempt)

  ctx.tools.listen('tools/pre-execute', (exec) => {
    const slot = conversation.of(exec)
    const streak =
      remindAfter || blockAfter ? breaker.record(slot, exec.name === RUN_CODE ? 'transport' : 'calls', `${exec.name}\0${canonicalJson(exec.arguments)}`) : 0
    for (const rule of denyRules) {
      const reason = denyRuleReason(rule, exec)
      if (reason) return { kind: 'deny', reason }
    }
    for (const rule of pathRules) {
      const reason = pathRuleReason(rule, exec)
      if (reason) return { kind: 'deny', reason }
    }
    if (blockAfter && streak >= blockAfter) {
      return {
        kind: 'deny',
        reason:
          `repeat-call breaker: "${exec.name}" was called ${streak} times in a row with the same arguments, so it was not run again. ` +
          'Its result will not change: use the result you already have, change the arguments, or take a different approach.',
      }
    }
    // a pre-check that consumes nothing, so a call that would be limited is denied before anyone is asked to approve it
    const limited = limiter.check(slot, slotOf(exec.agent), exec.name, false)
    if (limited) return { kind: 'deny', reason: limited }
    if (remindAfter && streak >= remindAfter) reminders.set(exec.token, streak)
  })

  // the count itself is taken here, after approval, synchronously, so concurrent calls cannot both take the last slot
  ctx.tools.guard((exec) => limiter.check(conversation.of(exec), slotOf(exec.agent), exec.name, true))

  // a program sees a nested call's value, never its content: its reminders go on the run_code result the model reads
  const programReminders = new WeakMap<ExecutionToken, Map<string, string>>()
  const reminder = (tool: string, streak: number) =>
    `[reminder] That was call ${streak} in a row of "${tool}" with the same arguments; the result will not change. ` +
    `Use what you already have or try something different.${blockAfter ? ` From ${blockAfter} identical calls in a row on, such calls are blocked.` : ''}`

  ctx.tools.listen('tools/post-execute', (exec, result) => {
    const streak = reminders.get(exec.token)
    const nested = programReminders.get(exec.token)
    programReminders.delete(exec.token)
    if (!streak && !nested) return
    const notes = [...(nested?.values() ?? [])]
    if (streak) {
      reminders.delete(exec.token)
      notes.push(reminder(exec.name, streak))
      if (exec.parent) {
        let forProgram = programReminders.get(exec.parent)
        if (!forProgram) programReminders.set(exec.parent, (forProgram = new Map()))
        // one note per tool, the latest count
        forProgram.set(exec.name, `${reminder(exec.name, streak)} (inside the program)`)
      }
    }
    return { kind: 'accept', content: `${result.content}\n\n${notes.join('\n')}` }
  })

  ctx.tools.listen(
    'tools/execute',
    timeoutWrapper((exec) => exec.tool.timeoutMs ?? (exempt(exec.name) ? undefined : config.timeout.defaultMs)),
  )

  ctx.on('agent/turn', (info) => {
    const slot = slotOf(info?.agent)
    breaker.reset(slot)
    limiter.resetTurn(slot)
  })
  ctx.on('tools/session-end', ({ session }) => void conversation.end(session))
}

/** starting it reaches no network and writes nothing (faber replay starts it as it is) */
export const replay = 'inert'

/** the plugin as one object, for `ctx.plugin(Guards, config)` with a default import */
export default { name, inject, reusable, Config, apply, replay }
