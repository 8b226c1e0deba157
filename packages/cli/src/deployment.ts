// deployment files: which plugins (by package name, each config validated by the plugin's own schemastery Config),
// the mode, the agents, the model and the session. errors name the file, the line, the key path and what was expected.

import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { AnthropicModel, type Model, OpenAIChatModel, ScriptedModel, type ScriptStep } from '@faber/agent'
import ToolRuntime, {
  type Agent,
  ConfigKeyError,
  createAgent,
  type Mask,
  type Mode,
  messageOf,
  nearestKey,
  pluginFailure,
  type SdkPresentation,
} from '@faber/core'
import type { DeploymentStore } from '@faber/store'
import { Context } from 'cordis'
import { isMap, isScalar, LineCounter, parseDocument } from 'yaml'

export type Path = (string | number)[]

export class DeploymentError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'DeploymentError'
  }
}

export interface PluginSpec {
  /** the key as written, e.g. `@faber/plugin-tools-fs` or `@faber/plugin-tools-fs:docs` */
  key: string
  /** what is imported: a package name or a path relative to the deployment file, with `#Name` for a named export */
  use: string
  config: unknown
  /** a plugin object given directly (programmatic deployments) instead of `use` */
  plugin?: unknown
}

export interface AgentSpec {
  name: string
  parent?: string
  mode?: Mode
  /** how this agent is shown the SDK (presentSdk) */
  sdk?: SdkPresentation
  restrict?: Mask
  plugins: PluginSpec[]
}

export type ModelSpec =
  | { provider: 'scripted'; script: ScriptStep[]; latencyMs?: number }
  | {
      provider: 'openai' | 'anthropic'
      /** required for openai; anthropic defaults to https://api.anthropic.com/v1 */
      baseURL?: string
      model: string
      /** the name of the environment variable holding the API key; never the key itself (anthropic: ANTHROPIC_API_KEY by default) */
      apiKeyEnv?: string
      timeoutMs?: number
      maxRetries?: number
      temperature?: number
      maxTokens?: number
      stream?: boolean
    }

export interface SessionSpec {
  /** the agent the chat speaks for; default: the first agent, or the global layer when there is none */
  agent?: string
  persona?: string
  context?: string
  maxSteps?: number
  /** a JSONL session log; continued when it exists */
  log?: string
}

export interface DeploymentSpec {
  /** where it came from, for messages */
  source: string
  /** what relative paths resolve against */
  dir: string
  mode: Mode
  core: Record<string, unknown>
  plugins: PluginSpec[]
  agents: AgentSpec[]
  model?: ModelSpec
  session: SessionSpec
  /** the line a key path is written on, when the deployment came from a file */
  locate: Locate
}

/** formats a key path: plugins["@faber/plugin-guards"].breaker.blockAfter */
export function formatPath(path: Path): string {
  let out = ''
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else if (/^[A-Za-z_$][\w$]*$/.test(key)) out += out ? `.${key}` : key
    else out += `[${JSON.stringify(key)}]`
  }
  return out || '(top level)'
}

export type Locate = (path: Path) => number | undefined

/** `file:line: key.path: what` */
export function describe(source: string, locate: Locate, path: Path, what: string): string {
  const line = locate(path)
  return `${source}${line ? `:${line}` : ''}: ${formatPath(path)}: ${what}`
}

/** one thing wrong with a deployment: its message (`file:line: key.path: what`) and its line, for the order */
interface Problem {
  line?: number
  message: string
}

/** every problem found, in the order of the file's lines, as one error */
function problemsError(problems: Problem[]): DeploymentError {
  const sorted = problems.map((p, i) => ({ ...p, i })).sort((a, b) => (a.line ?? Infinity) - (b.line ?? Infinity) || a.i - b.i)
  return new DeploymentError(sorted.map((p) => p.message).join('\n'))
}

function typeName(value: unknown) {
  return value === null ? 'null' : Array.isArray(value) ? 'a list' : typeof value === 'object' ? 'a mapping' : `${typeof value} ${JSON.stringify(value)}`
}

const MODES = ['native', 'code', 'both']
const SDK_PRESENTATIONS = ['full', 'index', 'auto']
const TOP = ['mode', 'core', 'plugins', 'agents', 'model', 'session']

/** `${dir}`, `${cwd}` and `${env.NAME}` in string values; one that cannot be substituted is reported and left as written */
function interpolate(value: unknown, dir: string, at: Path, bad: (path: Path, what: string) => undefined): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([^}]*)\}/g, (written, name: string) => {
      if (name === 'dir') return dir
      if (name === 'cwd') return process.cwd()
      if (name.startsWith('env.')) {
        const found = process.env[name.slice(4)]
        return found ?? bad(at, `the environment variable ${name.slice(4)} is not set`) ?? written
      }
      return bad(at, `unknown substitution \${${name}}; use \${dir}, \${cwd} or \${env.NAME}`) ?? written
    })
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, dir, [...at, i], bad))
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, dir, [...at, k], bad)]))
  }
  return value
}

/**
 * where a deployment keeps its store: its '@faber/store' plugin's config (path, url or urlEnv, and their timeouts);
 * a DeploymentError, ending with `missing`, when it has none
 */
export function deploymentStore(spec: DeploymentSpec, missing: string): DeploymentStore.ConfigInput {
  const config = spec.plugins.find((plugin) => plugin.use === '@faber/store')?.config as DeploymentStore.ConfigInput | undefined
  if (!config || typeof config !== 'object' || !['path', 'url', 'urlEnv'].some((key) => typeof config[key as keyof DeploymentStore.ConfigInput] === 'string')) {
    throw new DeploymentError(`${spec.source}: plugins: no '@faber/store' plugin with a path, url or urlEnv, so ${missing}`)
  }
  return config
}

/**
 * reads a deployment file; throws DeploymentError naming every problem, each with file, line and key path. when the
 * file's shape is wrong somewhere, the plugins it names are imported and their configs checked too, so that one run
 * reports all of it
 */
export async function loadDeploymentFile(file: string): Promise<DeploymentSpec> {
  const path = resolve(file)
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    throw new DeploymentError(`${file}: cannot read the deployment file (${(error as NodeJS.ErrnoException).code ?? error})`)
  }
  const { spec, problems } = checkDeployment(text, file, dirname(path))
  if (spec && !problems.length) return spec
  if (spec) problems.push(...(await loadPluginsChecked(spec)).problems)
  throw problemsError(problems)
}

export function parseDeployment(text: string, source: string, dir: string): DeploymentSpec {
  const { spec, problems } = checkDeployment(text, source, dir)
  if (problems.length || !spec) throw problemsError(problems)
  return spec
}

/** the spec of a deployment file, as far as it could be read, and what is wrong with it */
function checkDeployment(text: string, source: string, dir: string): { spec?: DeploymentSpec; problems: Problem[] } {
  const lines = new LineCounter()
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true })
  if (doc.errors.length) {
    // after a syntax error the rest of the structure is a guess: the first one is the one to fix
    const error = doc.errors[0]
    const { line } = lines.linePos(error.pos[0])
    return { problems: [{ line, message: `${source}:${line}: not valid YAML: ${error.message.split('\n')[0]}` }] }
  }
  const locate: Locate = (at) => {
    // a key's own line (an unknown key's value may start on the next one)
    const parent = at.length ? doc.getIn(at.slice(0, -1), true) : undefined
    if (isMap(parent)) {
      const pair = parent.items.find((item) => isScalar(item.key) && item.key.value === at.at(-1))
      const range = (pair?.key as { range?: [number, number, number] } | undefined)?.range
      if (range) return lines.linePos(range[0]).line
    }
    for (let n = at.length; n >= 0; n--) {
      const node = doc.getIn(at.slice(0, n), true) as { range?: [number, number, number] } | undefined
      if (node?.range) return lines.linePos(node.range[0]).line
    }
  }
  return checkObject(doc.toJS() ?? {}, source, dir, locate)
}

/** checks a deployment given as an object (a parsed file, or one built in code); throws DeploymentError naming every problem */
export function readDeployment(raw: unknown, source: string, dir: string, locate: Locate = () => undefined): DeploymentSpec {
  const { spec, problems } = checkObject(raw, source, dir, locate)
  if (problems.length) throw problemsError(problems)
  return spec
}

/** the spec, with each value that is wrong reported and left out (or a default in its place), and the problems */
function checkObject(raw: unknown, source: string, dir: string, locate: Locate): { spec: DeploymentSpec; problems: Problem[] } {
  const problems: Problem[] = []
  const bad = (at: Path, what: string): undefined => {
    problems.push({ line: locate(at), message: describe(source, locate, at, what) })
    return undefined
  }
  const mapping = (value: unknown, at: Path): Record<string, unknown> => {
    if (value === undefined || value === null) return {}
    if (typeof value !== 'object' || Array.isArray(value)) return bad(at, `expected a mapping but got ${typeName(value)}`) ?? {}
    return value as Record<string, unknown>
  }
  const only = (value: Record<string, unknown>, keys: string[], at: Path) => {
    for (const key of Object.keys(value)) {
      if (keys.includes(key)) continue
      const near = nearestKey(key, keys)
      bad([...at, key], near ? `unknown key; did you mean \`${near}\`?` : `unknown key; expected one of ${keys.join(', ')}`)
    }
  }
  const string = (value: unknown, at: Path, required = false): string | undefined => {
    if (value === undefined && !required) return undefined
    if (typeof value !== 'string' || !value) return bad(at, `expected a non-empty string but got ${value === undefined ? 'nothing' : typeName(value)}`)
    return value
  }
  const number = (value: unknown, at: Path): number | undefined => {
    if (value === undefined) return undefined
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return bad(at, `expected a non-negative number but got ${typeName(value)}`)
    return value
  }
  const mode = (value: unknown, at: Path): Mode | undefined => {
    if (value === undefined) return undefined
    if (!MODES.includes(value as string)) return bad(at, `expected one of ${MODES.join(', ')} but got ${typeName(value)}`)
    return value as Mode
  }
  const plugins = (value: unknown, at: Path): PluginSpec[] =>
    Object.entries(mapping(value, at))
      .filter(([key]) => !key.startsWith('~'))
      .map(([key, config]) => {
        const instance = /^(.+?):[\w-]+$/.exec(key)
        const use = instance && !instance[1].endsWith('/') && instance[1] !== '@' ? instance[1] : key
        return { key, use, config: interpolate(config ?? {}, dir, [...at, key], bad) }
      })

  const top = mapping(raw, [])
  only(top, TOP, [])
  const core = mapping(top.core, ['core'])
  const spec: DeploymentSpec = {
    source,
    dir,
    mode: mode(top.mode, ['mode']) ?? mode(core.mode, ['core', 'mode']) ?? 'native',
    core,
    plugins: plugins(top.plugins, ['plugins']),
    agents: [],
    session: {},
    locate,
  }
  const names = new Set<string>()
  const agents =
    top.agents === undefined
      ? []
      : Array.isArray(top.agents)
        ? top.agents
        : (bad(['agents'], `expected a list of agents but got ${typeName(top.agents)}`) ?? [])
  for (const [index, entry] of agents.entries()) {
    const at = ['agents', index]
    const agent = mapping(entry, at)
    only(agent, ['name', 'parent', 'mode', 'sdk', 'restrict', 'plugins'], at)
    const name = string(agent.name, [...at, 'name'], true)
    const duplicate = name !== undefined && names.has(name)
    if (duplicate) bad([...at, 'name'], `agent "${name}" is defined twice`)
    const parent = string(agent.parent, [...at, 'parent'])
    if (parent && !names.has(parent)) bad([...at, 'parent'], `expected the name of an agent defined above, but "${parent}" is not one`)
    let restrict: Mask | undefined
    if (agent.restrict !== undefined) {
      const r = mapping(agent.restrict, [...at, 'restrict'])
      const keys = Object.keys(r)
      const list = r[keys[0]]
      if (keys.length !== 1 || !['allow', 'deny'].includes(keys[0])) bad([...at, 'restrict'], 'expected exactly one of allow: [names] or deny: [names]')
      else if (!Array.isArray(list) || list.some((n) => typeof n !== 'string'))
        bad([...at, 'restrict', keys[0]], `expected a list of tool names but got ${typeName(list)}`)
      else restrict = (keys[0] === 'allow' ? { allow: list } : { deny: list }) as Mask
    }
    if (agent.sdk !== undefined && !SDK_PRESENTATIONS.includes(agent.sdk as string)) {
      bad([...at, 'sdk'], `expected one of ${SDK_PRESENTATIONS.join(', ')} but got ${typeName(agent.sdk)}`)
    }
    const checked = { parent, mode: mode(agent.mode, [...at, 'mode']), sdk: agent.sdk as SdkPresentation | undefined, restrict }
    const agentPlugins = plugins(agent.plugins, [...at, 'plugins'])
    // an agent without a usable name is reported above and left out; the later agents are still checked
    if (!name || duplicate) continue
    names.add(name)
    spec.agents.push({ name, ...checked, plugins: agentPlugins })
  }
  if (top.model !== undefined) {
    const model = interpolate(mapping(top.model, ['model']), dir, ['model'], bad) as Record<string, unknown>
    const provider = model.provider ?? 'openai'
    if (provider === 'scripted') {
      only(model, ['provider', 'script', 'latencyMs'], ['model'])
      if (!Array.isArray(model.script)) bad(['model', 'script'], `expected a list of model turns ({ text?, toolCalls? }) but got ${typeName(model.script)}`)
      spec.model = { provider, script: (model.script ?? []) as ScriptStep[], latencyMs: number(model.latencyMs, ['model', 'latencyMs']) }
    } else if (provider === 'openai' || provider === 'anthropic') {
      only(model, ['provider', 'baseURL', 'model', 'apiKeyEnv', 'timeoutMs', 'maxRetries', 'temperature', 'maxTokens', 'stream'], ['model'])
      if (model.stream !== undefined && typeof model.stream !== 'boolean') bad(['model', 'stream'], `expected true or false but got ${typeName(model.stream)}`)
      spec.model = {
        provider,
        baseURL: string(model.baseURL, ['model', 'baseURL'], provider === 'openai'),
        model: string(model.model, ['model', 'model'], true) ?? '',
        apiKeyEnv: string(model.apiKeyEnv, ['model', 'apiKeyEnv']) ?? (provider === 'anthropic' ? 'ANTHROPIC_API_KEY' : undefined),
        timeoutMs: number(model.timeoutMs, ['model', 'timeoutMs']),
        maxRetries: number(model.maxRetries, ['model', 'maxRetries']),
        temperature: number(model.temperature, ['model', 'temperature']),
        maxTokens: number(model.maxTokens, ['model', 'maxTokens']),
        stream: model.stream as boolean | undefined,
      }
    } else {
      bad(['model', 'provider'], `expected openai, anthropic or scripted but got ${typeName(provider)}`)
    }
  }
  const session = interpolate(mapping(top.session, ['session']), dir, ['session'], bad) as Record<string, unknown>
  only(session, ['agent', 'persona', 'context', 'maxSteps', 'log'], ['session'])
  const agentName = string(session.agent, ['session', 'agent'])
  if (agentName && !names.has(agentName)) bad(['session', 'agent'], `expected the name of an agent in agents, but "${agentName}" is not one`)
  const log = string(session.log, ['session', 'log'])
  spec.session = {
    agent: agentName,
    persona: string(session.persona, ['session', 'persona']),
    context: string(session.context, ['session', 'context']),
    maxSteps: number(session.maxSteps, ['session', 'maxSteps']),
    log: log === undefined ? undefined : resolve(dir, log),
  }
  spec.core = { ...core, mode: spec.mode }
  const checked = tryConfig(ToolRuntime, spec.core)
  if (checked) bad(['core', ...checked.path], checked.message)
  return { spec, problems }
}

function tryConfig(plugin: unknown, config: unknown): { path: Path; message: string } | undefined {
  const schema = (plugin as { Config?: (value: unknown) => unknown })?.Config
  if (typeof schema !== 'function') return
  try {
    schema(config)
  } catch (error) {
    try {
      const path = ((error as { options?: { path?: Path } }).options?.path ?? []) as Path
      const message = ConfigKeyError.isInstance(error) ? error.detail : String((error as Error).message ?? error).replace(/^\$(\.[\w$]+|\[[^\]]*\])*\s*/, '')
      return { path, message }
    } catch {
      // a plugin's Config may throw anything: a value with no prototype (String() of it throws), a Proxy whose traps throw
      return { path: [], message: messageOf(error) }
    }
  }
}

/** the plugin a module exports: the named export asked for, its default export, or the module itself when it exports `apply` */
function pluginOf(module: Record<string, unknown>, name?: string): unknown {
  const candidate = name ? module[name] : (module.default ?? module)
  if (typeof candidate === 'function') return candidate
  if (candidate && typeof (candidate as { apply?: unknown }).apply === 'function') {
    // a module namespace is not extensible: give cordis a plain object with the same members
    return Object.prototype.toString.call(candidate) === '[object Module]' ? { ...candidate } : candidate
  }
}

const modules = new Map<string, Promise<Record<string, unknown>>>()

async function importPlugin(use: string, dir: string): Promise<Record<string, unknown>> {
  let target: string
  if (use.startsWith('.') || isAbsolute(use)) {
    target = pathToFileURL(resolve(dir, use)).href
  } else {
    try {
      // resolve from the deployment's directory first, so a deployment can use plugins installed next to it
      target = pathToFileURL(createRequire(join(dir, 'deployment.js')).resolve(use)).href
    } catch {
      target = use
    }
  }
  let loading = modules.get(target)
  if (!loading) modules.set(target, (loading = import(target)))
  return loading
}

export interface LoadedPlugin {
  spec: PluginSpec
  plugin: unknown
  config: unknown
}

type Loaded = { global: LoadedPlugin[]; agents: Map<string, LoadedPlugin[]> }

/** imports the plugins and validates each config against the plugin's Config; throws DeploymentError naming every problem */
export async function loadPlugins(spec: DeploymentSpec): Promise<Loaded> {
  const { loaded, problems } = await loadPluginsChecked(spec)
  if (problems.length) throw problemsError(problems)
  return loaded
}

/** the plugins that loaded with a valid config, and a problem for each that did not */
async function loadPluginsChecked(spec: DeploymentSpec): Promise<{ loaded: Loaded; problems: Problem[] }> {
  const problems: Problem[] = []
  const bad = (at: Path, what: string): undefined => {
    problems.push({ line: spec.locate(at), message: describe(spec.source, spec.locate, at, what) })
    return undefined
  }
  const load = async (entry: PluginSpec, at: Path): Promise<LoadedPlugin | undefined> => {
    let plugin = entry.plugin
    if (!plugin) {
      let module: Record<string, unknown>
      const [specifier, exported] = entry.use.split('#')
      try {
        module = await importPlugin(specifier, spec.dir)
      } catch (error) {
        // a module may throw anything at its top level: messageOf reads it without trusting it to turn into text
        const code = (error as NodeJS.ErrnoException).code
        let detail = code === 'ERR_MODULE_NOT_FOUND' ? 'no such package or file is installed' : messageOf(error)
        // a .ts file with import/export outside a "type": "module" package: Node takes it for CommonJS, and the
        // require() of an ES module from inside this import fails with a message about cycles
        if (code === 'ERR_REQUIRE_CYCLE_MODULE' && /\.[cm]?ts$/.test(specifier)) {
          detail = `it is an ES module in a CommonJS scope: name it .mjs or .mts, or put a package.json with "type": "module" beside it (${detail})`
        }
        return bad(at, `cannot load plugin "${specifier}": ${detail}`)
      }
      plugin = pluginOf(module, exported)
      if (!plugin) {
        const what = exported ? `has no export named ${exported} that is a cordis plugin` : 'does not export a cordis plugin (a default export, or apply)'
        return bad(at, `"${specifier}" ${what}`)
      }
    }
    const problem = tryConfig(plugin, entry.config)
    if (problem) return bad([...at, ...problem.path], problem.message)
    const schema = (plugin as { Config?: (value: unknown) => unknown }).Config
    return { spec: entry, plugin, config: typeof schema === 'function' ? schema(entry.config) : entry.config }
  }
  const all = async (entries: PluginSpec[], at: Path) =>
    (await Promise.all(entries.map((p) => load(p, [...at, p.key])))).filter((p): p is LoadedPlugin => p !== undefined)
  const global = await all(spec.plugins, ['plugins'])
  const agents = new Map<string, LoadedPlugin[]>()
  for (const [index, agent] of spec.agents.entries()) agents.set(agent.name, await all(agent.plugins, ['agents', index, 'plugins']))
  return { loaded: { global, agents }, problems }
}

/**
 * cordis logs a failing plugin instead of throwing: a deployment with a plugin that did not start must not run, so
 * surface the first one, naming it, its place in the deployment and the reason
 */
export async function rethrowPluginErrors(ctx: Context, spec?: DeploymentSpec, loaded?: Loaded) {
  const failure = await pluginFailure(ctx)
  if (!failure) return
  const entries = [
    ...(loaded?.global ?? []).map((entry) => ({ entry, at: ['plugins', entry.spec.key] as Path })),
    ...(spec?.agents ?? []).flatMap((agent, index) =>
      (loaded?.agents.get(agent.name) ?? []).map((entry) => ({ entry, at: ['agents', index, 'plugins', entry.spec.key] as Path })),
    ),
  ]
  const found = entries.find(({ entry }) => entry.plugin === failure.target)
  throw new DeploymentError(spec && found ? describe(spec.source, spec.locate, found.at, failure.message) : failure.message)
}

export interface Deployed {
  ctx: Context
  spec: DeploymentSpec
  agents: Map<string, Agent>
  /** the agent the session speaks for */
  agent?: Agent
  stop(): Promise<void>
  /** throws a DeploymentError naming the first plugin that did not start, and where the file loads it */
  check(): Promise<void>
}

/**
 * composes and starts a deployment: the core, the global plugins, then the agents with their plugins, modes and masks.
 * a plugin that did not start is a DeploymentError, unless `keepFaults` (faber inspect, which shows it): the deployment
 * then runs no tool (DEPLOYMENT_FAILED) until it is fixed
 */
export async function compose(spec: DeploymentSpec, options: { context?: Context; keepFaults?: boolean } = {}): Promise<Deployed> {
  const loaded = await loadPlugins(spec)
  const ctx = options.context ?? new Context()
  try {
    return await start(ctx, spec, loaded, !options.keepFaults)
  } catch (error) {
    // nothing of a deployment that did not start keeps running (a context handed in is the caller's to stop)
    if (!options.context) await ctx.stop()
    throw error
  }
}

/** `checked`: a plugin that did not start throws a DeploymentError naming it; unchecked, it is kept (and shown) */
async function start(ctx: Context, spec: DeploymentSpec, loaded: Loaded, checked = true): Promise<Deployed> {
  ctx.plugin(ToolRuntime, spec.core)
  for (const { plugin, config } of loaded.global) ctx.plugin(plugin as never, config)
  await ctx.start()
  if (checked) await rethrowPluginErrors(ctx, spec, loaded)

  const agents = new Map<string, Agent>()
  ctx.plugin({
    name: 'deployment-agents',
    inject: ['tools'],
    apply(scope: Context) {
      for (const agent of spec.agents) {
        const made = createAgent(scope, { name: agent.name, parent: agent.parent ? agents.get(agent.parent) : undefined })
        agents.set(agent.name, made)
        for (const { plugin, config } of loaded.agents.get(agent.name) ?? []) made.ctx.plugin(plugin as never, config)
      }
    },
  })
  if (checked) await rethrowPluginErrors(ctx, spec, loaded)
  for (const [index, agent] of spec.agents.entries()) {
    const made = agents.get(agent.name)!
    try {
      if (agent.mode) made.ctx.tools.presentAs(agent.mode)
      if (agent.sdk) made.ctx.tools.presentSdk(agent.sdk)
      if (agent.restrict) made.ctx.tools.restrict(agent.restrict)
    } catch (error) {
      throw new DeploymentError(describe(spec.source, spec.locate, ['agents', index, agent.restrict ? 'restrict' : 'mode'], (error as Error).message))
    }
  }
  const name = spec.session.agent ?? spec.agents[0]?.name
  const check = () => rethrowPluginErrors(ctx, spec, loaded)
  return { ctx, spec, agents, agent: name ? agents.get(name) : undefined, stop: () => ctx.stop(), check }
}

/** the keys whose value is not undefined */
export function given<T extends object>(values: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> }
}

export function createModel(spec: ModelSpec | undefined, source: string): Model {
  if (!spec)
    throw new DeploymentError(
      `${source}: model: no model is configured; add model: { baseURL, model, apiKeyEnv } (or provider: anthropic, or provider: scripted)`,
    )
  if (spec.provider === 'scripted') return new ScriptedModel(spec.script, { latencyMs: spec.latencyMs })
  let apiKey: string | undefined
  if (spec.apiKeyEnv) {
    apiKey = process.env[spec.apiKeyEnv]
    if (!apiKey) throw new DeploymentError(`${source}: model.apiKeyEnv: the environment variable ${spec.apiKeyEnv} is not set (it should hold the API key)`)
  }
  const { provider, baseURL, model, timeoutMs, maxRetries, temperature, maxTokens, stream } = spec
  // a key the file leaves out is left out here too, so the adapter's default applies
  const options = given({ apiKey, timeoutMs, maxRetries, temperature, maxTokens, stream })
  if (provider === 'anthropic') return new AnthropicModel({ model, ...given({ baseURL }), ...options })
  return new OpenAIChatModel({ baseURL: baseURL!, model, ...options })
}
