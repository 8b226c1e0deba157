// @faber/plugin-tools-shell: a bash tool over one workspace root, confined by bubblewrap unless the deployment
// says `confine: false`, with background jobs.

import { realpathSync, statSync } from 'node:fs'
import path from 'node:path'
import { defineConfig } from '@faber/core'
import { type Context, Schema } from 'cordis'
import { bwrapArgs, findCgroups, type Launch, probeBubblewrap, protectArgs, type SandboxConfig, SCRATCH } from './confine.ts'
import { shellTools } from './tools.ts'

export { Capture, type Captured } from './capture.ts'
export { bwrapArgs, probeBubblewrap, protectArgs, type SandboxConfig, SCRATCH } from './confine.ts'
export { type Outcome, ShellError } from './tools.ts'

export const name = 'tools-shell'
export const reusable = true
export const inject = ['tools']

export interface Config {
  root: string
  name: string
  shell: string
  confine: boolean
  bwrap?: string
  sandbox: SandboxConfig
  timeoutMs: number
  maxTimeoutMs: number
  outputBytes: number
  maxProcesses: number
  killGraceMs: number
  env: { allow: string[]; set: Record<string, string> }
  jobs: { max: number; maxMs: number }
}

/** what a deployer writes: the root, and anything to change */
export type ConfigInput = { root: string } & Partial<Omit<Config, 'root' | 'sandbox' | 'env' | 'jobs'>> & {
    sandbox?: Partial<SandboxConfig>
    env?: Partial<Config['env']>
    jobs?: Partial<Config['jobs']>
  }

const SANDBOX: SandboxConfig = {
  filesystem: 'readonly',
  network: false,
  hide: ['~', '/home', '/root', '/run', '/var/run', '/mnt', '/media', '/srv'],
  readOnly: [],
  writable: [],
  protect: ['.git', '.faber'],
}

const ENV: Config['env'] = {
  allow: ['PATH', 'LANG', 'LANGUAGE', 'LC_*', 'TERM', 'TZ', 'USER', 'LOGNAME', 'HOME', 'SHELL'],
  set: {},
}

export const Config = defineConfig<Config, ConfigInput>()(
  Schema.object({
    root: Schema.string().required().description('the workspace directory commands run in'),
    name: Schema.string().default('bash').description('the tool name; the job tools are <name>_output and <name>_stop'),
    shell: Schema.string().default('/bin/bash').description('the shell that runs each command as `<shell> -c <command>`'),
    confine: Schema.boolean()
      .default(true)
      .description('run commands inside bubblewrap; when it is unavailable the plugin refuses to start, unless this is false'),
    bwrap: Schema.string().description('the bubblewrap binary; by default the first bwrap on PATH'),
    sandbox: Schema.object({
      filesystem: Schema.union(['readonly', 'minimal'] as const)
        .default(SANDBOX.filesystem)
        .description('readonly: the host file system, read-only, minus hide; minimal: only /usr, /bin, /lib*, /etc, /opt and readOnly'),
      network: Schema.boolean().default(false).description('let commands use the network (the host network namespace)'),
      hide: Schema.array(Schema.string())
        .default(SANDBOX.hide)
        .description('directories replaced by an empty tmpfs (readonly file system); ~ is the home directory of this process'),
      readOnly: Schema.array(Schema.string()).default(SANDBOX.readOnly).description('more directories to show read-only'),
      writable: Schema.array(Schema.string()).default(SANDBOX.writable).description('more directories to make writable'),
      protect: Schema.array(Schema.string())
        .default(SANDBOX.protect)
        .description('paths inside the root kept read-only (those that exist when a command starts)'),
    })
      .default(SANDBOX)
      .description('what a confined command sees'),
    timeoutMs: Schema.natural().min(1).default(120_000).description('a command is killed after this long unless its call asks for another timeout'),
    maxTimeoutMs: Schema.natural().min(1).default(600_000).description('the longest timeout a call may ask for'),
    outputBytes: Schema.natural()
      .min(2)
      .default(30_000)
      .description('bytes of each stream kept per call (half from the start, half from the end); the middle is elided'),
    maxProcesses: Schema.natural().min(1).default(512).description('processes one command may have at once (needs a pids cgroup)'),
    killGraceMs: Schema.natural().default(2000).description('after a timeout or stop, how long SIGTERM has before SIGKILL'),
    env: Schema.object({
      allow: Schema.array(Schema.string()).default(ENV.allow).description('variables passed from this process (a trailing * matches a prefix)'),
      set: Schema.dict(Schema.string()).default(ENV.set).description('variables set for every command'),
    })
      .default(ENV)
      .description('the environment of commands; nothing else is passed'),
    jobs: Schema.object({
      max: Schema.natural().min(1).default(4).description('background jobs running at once'),
      maxMs: Schema.natural().min(1).default(3_600_000).description('a background job is killed after this long'),
    })
      .default({ max: 4, maxMs: 3_600_000 })
      .description('background jobs'),
  }),
)

/**
 * the environment a command gets: allowed variables of this process, then `set`. with `root`, an inherited PATH
 * loses its entries a command could write to — empty or relative ones (the root, as commands run there) and any
 * inside the root — so an earlier command cannot plant a `git` that a later, approved `git status` would run.
 */
export function commandEnv(env: Config['env'], from: NodeJS.ProcessEnv = process.env, root?: string): NodeJS.ProcessEnv {
  const exact = new Set(env.allow.filter((name) => !name.endsWith('*')))
  const prefixes = env.allow.filter((name) => name.endsWith('*')).map((name) => name.slice(0, -1))
  const result: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(from)) {
    if (value !== undefined && (exact.has(key) || prefixes.some((prefix) => key.startsWith(prefix)))) result[key] = value
  }
  if (root !== undefined && result.PATH !== undefined) {
    result.PATH = result.PATH.split(':')
      .filter((dir) => path.isAbsolute(dir) && dir !== root && !path.resolve(dir).startsWith(root + path.sep))
      .join(':')
  }
  return { ...result, ...env.set }
}

function realRoot(root: string) {
  let real: string
  try {
    real = realpathSync(path.resolve(root))
  } catch {
    throw new TypeError(`tools-shell: the workspace root "${root}" does not exist; create it or fix the root option`)
  }
  if (!statSync(real).isDirectory()) throw new TypeError(`tools-shell: the workspace root "${root}" is not a directory`)
  return real
}

export function apply(ctx: Context, config: Config) {
  const root = realRoot(config.root)
  if (config.maxTimeoutMs < config.timeoutMs) throw new TypeError('tools-shell: maxTimeoutMs must be at least timeoutMs')
  const cgroups = findCgroups()
  const env = commandEnv(config.env, process.env, root)
  let launch: (command: string) => Launch
  let status: string
  let confinement: string | undefined
  if (config.confine) {
    // protected paths are checked per command, not here: the probe passes no descriptor
    const probe = probeBubblewrap(root, config.shell, { ...config.sandbox, protect: [] }, config.bwrap)
    if (!probe.ok) {
      throw new TypeError(`tools-shell: commands cannot be confined: ${probe.why}. Install bubblewrap, or set confine: false to run them unconfined`)
    }
    // the one writable place outside the root, where programs look for one
    for (const name of ['HOME', 'TMPDIR']) if (!(name in config.env.set)) env[name] = SCRATCH
    // built per command: protected paths are the ones that exist when it starts
    launch = (command) => {
      // bwrapArgs may throw: before any descriptor is opened
      const base = bwrapArgs(root, config.shell, config.sandbox)
      const protect = protectArgs(root, config.sandbox.protect)
      return { file: probe.bwrap, args: [...base, ...protect.args, '--', config.shell, '-c', command], fds: protect.fds }
    }
    const fs = config.sandbox.filesystem === 'readonly' ? 'the rest of the file system read-only' : 'only system directories visible, read-only'
    status =
      `confined by bubblewrap: ${root} writable, ${fs}, ${config.sandbox.network ? 'network allowed' : 'no network'}, ` +
      `own PID namespace, $TMPDIR ${SCRATCH} a scratch directory per command; processes ${cgroups.description}`
    const writable = config.sandbox.writable.length ? ` and ${config.sandbox.writable.join(', ')}` : ''
    const protectedToo = config.sandbox.protect.length ? ` (in the workspace, ${config.sandbox.protect.join(', ')} too)` : ''
    confinement =
      `Only the workspace${writable} is writable, and $TMPDIR (${SCRATCH}, also $HOME) for scratch files, deleted when the command ends; ` +
      `everything else is read-only${protectedToo}: a write there fails with "Read-only file system". Keep what you need in the workspace.`
  } else {
    launch = (command) => ({ file: config.shell, args: ['-c', command], fds: [] })
    status = `NOT confined (confine: false): commands run with this process's user, file system and network; processes ${cgroups.description}`
  }
  ctx.logger('tools-shell').debug(status)
  const shell = shellTools({
    name: config.name,
    root,
    shell: config.shell,
    env,
    launch,
    cgroups,
    limits: {
      headBytes: Math.ceil(config.outputBytes / 2),
      tailBytes: Math.floor(config.outputBytes / 2),
      killGraceMs: config.killGraceMs,
      maxProcesses: config.maxProcesses,
    },
    timeoutMs: config.timeoutMs,
    maxTimeoutMs: config.maxTimeoutMs,
    maxJobs: config.jobs.max,
    maxJobMs: config.jobs.maxMs,
    // shell: approval narrows remembered grants to the command; changesFiles: fs-observation stops trusting reads
    annotations: { shell: true, changesFiles: true, fsRoot: root, confined: config.confine },
    status,
    confinement,
  })
  ctx.on('dispose', () => shell.dispose())
  // jobs die with their session: a job belongs to the agent that started it
  ctx.on('agent/session-end', ({ agent }) => shell.endJobsOf(agent))
  // and with the MCP session that started them
  ctx.on('tools/session-end', ({ agent, session }) => shell.endJobsOf(agent, session))
  for (const tool of shell.tools) ctx.tools.register(tool)
}

/** starting it reaches no network and writes nothing (its bubblewrap probe runs with no network and writes nothing): faber replay starts it as it is */
export const replay = 'inert'

/** the plugin as one object, for `ctx.plugin(ToolsShell, config)` with a default import */
export default { name, reusable, inject, Config, apply, replay }
