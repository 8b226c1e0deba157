#!/usr/bin/env node
// the `faber` command. exit codes: 0 done, 1 a failure while running, 2 a usage or deployment error.

import { existsSync, readFileSync, realpathSync } from 'node:fs'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AnthropicModel, CallLog, OpenAIChatModel, SessionLog } from '@faber/agent'
import { messageOf } from '@faber/core/message'
import { Logger } from 'cordis'
import { chat } from './chat.ts'
import { runDemo } from './demo.ts'
import {
  compose,
  createModel,
  type Deployed,
  DeploymentError,
  type DeploymentSpec,
  given,
  loadDeploymentFile,
  type ModelSpec,
  readDeployment,
} from './deployment.ts'
import { GRANTS_HELP, GrantsUsageError, grants } from './grants.ts'
import { McpLoginUsageError, mcpLogin } from './mcp-login.ts'
import type { ReplayReport } from './replay.ts'
import { standardStack } from './stack.ts'
import { colorEnabled, createStyle, Spinner, type Style, visible } from './style.ts'

const HELP: Record<string, string> = {
  faber: `faber — a plugin-based runtime for the tools LLM agents call

Usage: faber <command> [options]

Commands:
  demo                      the demo: a code-mode deployment played by a scripted model (no network)
  run <deployment.yml>      compose a deployment file and chat with its model
  chat                      chat with a model given by flags or environment, on the standard deployment
  inspect <deployment.yml>  the deployment's inspector report: plugins, services, tools per agent, events;
                            with --web, a live view of it in the browser
  mcp <deployment.yml>      serve the deployment's agent over MCP (stdio, or --http)
  mcp login|logout <server> OAuth for a server the deployment imports: sign in, keep the tokens in its store
  grants list|revoke|export|import|pending|answer  the approval grants kept in a deployment's store, and its open questions
  replay <log>… --with <deployment.yml>  recorded sessions through a changed policy: what would change

run, chat, inspect and mcp without a file use ./faber.yml, else ./faber.yaml.

Options:
  -h, --help     help for faber or a command (faber <command> --help)
  --version      the version of faber
  --debug        stack traces and debug logs with any failure
  --no-color     plain output (also: NO_COLOR=1, or when piped)

Exit codes: 0 done, 1 a failure while running, 2 a usage or deployment error.`,
  grants: GRANTS_HELP,
  replay: `faber replay <session-log>… --with <deployment.yml> — what a changed policy would decide on recorded calls

Usage: faber replay <session.jsonl>… --with <deployment.yml> [--json] [--web [HOST:]PORT]

Every call the logs recorded (model-direct calls, run_code programs and each of their nested calls), in recorded
order, goes through the deployment's real pipeline: the Code Mode collapse, tools/pre-execute listeners, approval
(its rules and grants answer; a question for a person is reported as ask, never shown), guards, fs-observation
(its read history rebuilt from the recorded calls). Tool bodies never run: a call the deployment lets through gets
its recorded result, so the calls after it see the same world. Nothing is written: the deployment's store is read
into memory, no grant is kept, no file or row changes. The report lists each call whose decision changed, and a
summary by tool and by plugin.

Options:
  --with FILE  the deployment to replay through (required)
  --json       the report as JSON (deterministic: the same logs and deployment give the same bytes)
  --web [HOST:]PORT  then serve the web view of the replay's read-only deployment, with the report above its calls,
               until Ctrl-C (see faber inspect --help; its address goes to stderr)
  --token TOKEN  the token the view requires (see faber inspect --help)
  --no-color   plain output

Exit codes: 0 nothing became more permissive, 1 a call that was refused (denied, asked, or by the core) would now run, 2 bad input
(an unreadable or corrupted log, a log of another LOG_VERSION, a deployment that does not load).`,
  demo: `faber demo — watch a code-mode deployment at work, on a scripted model (no network, a few seconds)

Usage: faber demo [--json] [--keep] [--log FILE] [--web [HOST:]PORT]

A temporary workspace with real files, the real sandbox, and every plugin of the standard stack. The scripted
model first calls a tool directly (rejected by the core: under code mode only run_code is callable), then writes
a run_code program that reads files in parallel, recovers from a policy refusal, gets an approval, and returns a
summary. The transcript ends with the inspector's view and the call trace.

Options:
  --json      one JSON record per line (events, the report, the outcome) instead of the transcript
  --keep      keep the temporary workspace and print its path
  --log FILE  write the session log (JSONL) to FILE
  --web [HOST:]PORT  serve the inspector's live web view during the demo; the deployment and the view stay
              until Ctrl-C, to look at its calls, programs and approvals (see faber inspect --help)
  --no-color  plain output`,
  run: `faber run <deployment.yml> — compose a deployment file and chat with its model

Usage: faber run [deployment.yml] [--json] [--verbose] [--base-url URL] [--model NAME]

Each input line is a user turn. On a terminal: a prompt, Ctrl-C cancels the running turn, /exit leaves.
Piped: every line of stdin is run as a turn, then the command exits (exit 1 if a turn failed). A failed turn
is one message on stderr; the lines after it still run.

The file (YAML):
  mode: code                       # native | code | both
  core: { maxParallelSubCalls: 8 } # other @faber/core config
  plugins:                         # by package name (or ./path), each config checked by the plugin's Config
    '@faber/sandbox': {}
    '@faber/plugin-tools-fs': { root: '\${dir}/workspace' }   # \${dir} is the file's directory; also \${cwd}, \${env.NAME}
  agents:
    - { name: main, mode: code, restrict: { deny: [write] }, plugins: {} }
  model: { baseURL: https://api.deepseek.com, model: deepseek-chat, apiKeyEnv: DEEPSEEK_API_KEY }
  session: { agent: main, persona: '…', maxSteps: 24, log: ./session.jsonl }

Options:
  --json           JSON lines instead of the transcript
  --verbose        every nested call of a program on its own lines, also on a terminal (where they fold into
                   one progress line otherwise; piped output always has them)
  --base-url URL   talk to this endpoint instead of the file's model.baseURL (e.g. a local server)
  --model NAME     use this model instead of the file's model.model
  --web [HOST:]PORT  serve the live web view while it runs (see faber inspect --help)
  --no-color       plain output`,
  chat: `faber chat — chat with a model on the standard deployment (code mode, fs tools on a workspace)

With a deployment file (or ./faber.yml, ./faber.yaml in the current directory, unless --root or --mode is given) the
file's plugins, agents and session are used instead of the standard deployment, and its model unless --model (or
FABER_MODEL) names one.

Usage: faber chat [deployment.yml] [--provider P] [--base-url URL] [--model NAME] [--api-key-env VAR] [--root DIR] [--mode MODE] [--log FILE]

Options:
  --provider P         openai (an OpenAI-compatible chat completions endpoint) or anthropic (the Messages API);
                       env FABER_PROVIDER; default openai
  --base-url URL       the endpoint (env FABER_BASE_URL; default https://api.openai.com/v1, or https://api.anthropic.com/v1)
  --model NAME         the model (env FABER_MODEL)
  --api-key-env VAR    the environment variable holding the API key (default FABER_API_KEY, then OPENAI_API_KEY
                       or ANTHROPIC_API_KEY)
  --root DIR           the workspace the fs tools work in (default: the current directory)
  --mode MODE          native | code | both (default code)
  --log FILE           a JSONL session log; continued when it exists (a program left waiting on a person runs again first)
  --json               JSON lines instead of the transcript
  --verbose            every nested call on its own lines, also on a terminal
  --web [HOST:]PORT    serve the live web view while it runs (see faber inspect --help)
  --no-color           plain output`,
  inspect: `faber inspect <deployment.yml> — the inspector's report of a composed deployment

Usage: faber inspect [deployment.yml] [--json] [--web [HOST:]PORT] [--token TOKEN]

Composes the deployment (its model is not called) and prints plugins and their state, services and providers,
tools per agent (visible, wire, mode and its origin, what collapses), and listeners per event. A plugin that did
not start is shown, not refused: the report says the deployment is not in force (no tool runs: DEPLOYMENT_FAILED),
which plugin stops it and why, and the command exits 2.

With --web, the deployment keeps running and its live view is served in the browser until Ctrl-C: plugins with
their state and config (secrets masked), services, what each agent sees, calls as they happen with their stage
decisions, and approvals as they wait. To watch a deployment at work, give --web to the command that works it:
faber run, chat or mcp take the same option.

Options:
  --json              the report as JSON
  --web [HOST:]PORT   serve the live view at http://HOST:PORT/ (HOST defaults to 127.0.0.1; PORT 0 picks a free
                      port). Bound to any other host it requires a token in the URL, printed with it
  --token TOKEN       the token the view requires (16+ letters, digits, - or _); default: none on a loopback host,
                      a random one elsewhere
  --no-color          plain output`,
  mcp: `faber mcp <deployment.yml> — serve a deployment's agent over MCP (stdio, or streamable HTTP)

Usage: faber mcp [deployment.yml] [--agent NAME] [--http [HOST:]PORT] [--session-log FILE] [--max-message-bytes N]
       faber mcp login <server> [deployment.yml] [--fresh]
       faber mcp logout <server> [deployment.yml]

tools/list is exactly what the agent is shown (under code mode: run_code with the SDK); tools/call runs through
the whole pipeline, so every policy applies.

Options:
  --agent NAME             the agent whose view is served (default: session.agent, else the first agent, else
                           the global view)
  --http [HOST:]PORT       serve MCP streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults to
                           127.0.0.1; PORT 0 picks a free port). Each client gets its own session and approvals;
                           requests whose Host or Origin is not the listening host or a loopback name get 403.
  --allow-host NAME        with --http, also accept this host name in Host and Origin (repeatable)
  --session-log FILE       write the calls to this JSONL session log (default: the deployment's session.log) and
                           continue it when it exists: a run_code program checkpointed there while it waited on a
                           person runs again from the log when a client calls run_code again with the same arguments
  --max-message-bytes N    refuse larger messages with a JSON-RPC error (default 4194304)
  --web [HOST:]PORT        serve the live web view while it serves (its address goes to stderr on stdio)

login connects to one imported server (a url server with auth) on its own: it prints the URL to open, waits for
the browser to come back to a callback on 127.0.0.1, and keeps the OAuth client and tokens in the deployment's
store ('@faber/store'), where later runs use and refresh them. --fresh forgets what is kept first (another
account, a larger scope). logout forgets them. Tokens are never printed, only masked.`,
}

class UsageError extends Error {}

type Values = Record<string, string | boolean | string[] | undefined>

function parse(
  command: string,
  args: string[],
  options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>,
): { values: Values; positionals: string[] } {
  try {
    return parseArgs({ args, allowPositionals: true, options: { help: { type: 'boolean', short: 'h' }, 'no-color': { type: 'boolean' }, ...options } })
  } catch (error) {
    // node's own message for an unknown option ends in an unbalanced quote ("…as in '-- "--bogus""): say it plainly
    const unknown = /^Unknown option '([^']+)'/.exec((error as Error).message)?.[1]
    const what = unknown ? `unknown option ${unknown}` : (error as Error).message
    throw new UsageError(`faber ${command}: ${what}\nRun faber ${command} --help for its options.`)
  }
}

function styleFor(values: Values, stream: NodeJS.WriteStream = process.stdout): Style {
  return createStyle(values['no-color'] ? false : colorEnabled(stream))
}

/** what `faber run` and `faber chat` tell the chat from their flags */
function chatOptions(command: string, values: Values) {
  return { command: `faber ${command}`, style: styleFor(values), json: Boolean(values.json), verbose: Boolean(values.verbose) }
}

/** the file named, else ./faber.yml, else ./faber.yaml */
function deploymentArg(command: string, positionals: string[]) {
  if (positionals.length === 1) return positionals[0]
  if (positionals.length === 0) {
    const found = defaultDeployment()
    if (found) return found
    throw new UsageError(
      `faber ${command}: no deployment file given, and there is no faber.yml or faber.yaml in ${process.cwd()}\nUsage: faber ${command} [deployment.yml]`,
    )
  }
  throw new UsageError(`faber ${command}: expected one deployment file, got ${positionals.length}\nUsage: faber ${command} [deployment.yml]`)
}

function defaultDeployment(): string | undefined {
  return ['faber.yml', 'faber.yaml'].find((name) => existsSync(name))
}

/** runs `fn` with cordis' own plugin-failure logs off: a plugin that fails to start is reported once, as a DeploymentError */
async function quietly<T>(fn: () => Promise<T>): Promise<T> {
  const levels = Logger.levels as Record<string, unknown>
  const before = levels.app
  levels.app = 0
  try {
    return await fn()
  } finally {
    if (before === undefined) delete levels.app
    else levels.app = before
  }
}

/** composes a deployment; a plugin that fails to start is reported once, as a DeploymentError, not also as cordis' stack dump */
function composeReported(spec: DeploymentSpec, options: { keepFaults?: boolean } = {}): Promise<Deployed> {
  return quietly(() => compose(spec, options))
}

/** `faber run --base-url / --model`: the same deployment against another endpoint or model */
function overrideModel(spec: DeploymentSpec, values: Values): ModelSpec | undefined {
  const baseURL = values['base-url'] as string | undefined
  const model = values.model as string | undefined
  if (!baseURL && !model) return spec.model
  if (!spec.model || spec.model.provider === 'scripted')
    throw new UsageError(`faber run: --base-url and --model change the model of ${spec.source}, which has no provider: openai or anthropic model`)
  return { ...spec.model, ...(baseURL ? { baseURL } : {}), ...(model ? { model } : {}) }
}

/** `--http [HOST:]PORT`: a port alone listens on 127.0.0.1; an IPv6 host is written in brackets */
function parseListen(text: string): { host: string; port: number } {
  const match = /^(?:(\[[^\]]+\]|[^:[\]]+):)?(\d{1,5})$/.exec(text.trim())
  const port = Number(match?.[2])
  if (!match || port > 65535) throw new UsageError(`faber mcp: --http takes [HOST:]PORT (e.g. 3000, 127.0.0.1:3000, [::1]:3000), got "${text}"`)
  return { host: match[1]?.replace(/^\[|\]$/g, '') ?? '127.0.0.1', port }
}

async function listenArg(command: string, listen: Values[string]): Promise<{ host: string; port: number }> {
  const { parseListen } = await import('@faber/plugin-tool-cordis')
  try {
    return parseListen(String(listen))
  } catch (error) {
    throw new UsageError(`faber ${command}: --web: ${(error as Error).message}`)
  }
}

/** serves the live web view of a deployment when --web asked for one, loading the inspector if the deployment did not */
async function serveWeb(command: string, deployed: Deployed, values: Values, out: NodeJS.WritableStream = process.stdout, extra: { replay?: object } = {}) {
  const listen = values.web
  if (listen === undefined) {
    if (values.token !== undefined) throw new UsageError(`faber ${command}: --token only applies with --web`)
    // the deployment file may serve it itself (the inspector's web.listen): say where, with its token
    const configured = deployed.ctx.get('inspector')?.web
    if (configured) out.write(`faber ${command}: the live web view is at ${configured.url}\n`)
    return configured
  }
  const cordis = await import('@faber/plugin-tool-cordis')
  const where = await listenArg(command, listen)
  const { ctx } = deployed
  if (!ctx.get('inspector')) {
    ctx.plugin(cordis.default)
    await ctx.lifecycle.flush()
  }
  const inspector = ctx.get('inspector')
  if (!inspector) throw new Error('the inspector (@faber/plugin-tool-cordis) did not start')
  let view: Awaited<ReturnType<typeof inspector.serve>>
  try {
    view = await inspector.serve({ ...where, token: values.token as string | undefined, ...extra })
  } catch (error) {
    throw new UsageError(`faber ${command}: --web: ${(error as Error).message}`)
  }
  out.write(`faber ${command}: the live web view is at ${view.url}\n`)
  return view
}

function untilSignal(): Promise<void> {
  return new Promise<void>((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
}

async function composeFile(file: string, options: { keepFaults?: boolean } = {}): Promise<Deployed> {
  return composeReported(await loadDeploymentFile(file), options)
}

export function version(): string {
  const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
  return manifest.version
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  if (command === '--version' || command === '-V' || command === 'version') {
    process.stdout.write(`faber ${version()}\n`)
    return 0
  }
  if (!command || command === '-h' || command === '--help' || command === 'help') {
    process.stdout.write(`${HELP[rest[0] ?? ''] ?? HELP.faber}\n`)
    return command ? 0 : 2
  }
  if (!(command in HELP) || command === 'faber') {
    process.stderr.write(`faber: unknown command "${command}"\n\n${HELP.faber}\n`)
    return 2
  }
  switch (command) {
    case 'grants': {
      const { values, positionals } = parse(command, rest, {
        store: { type: 'string' },
        deployment: { type: 'string', short: 'd' },
        json: { type: 'boolean' },
        replace: { type: 'boolean' },
        output: { type: 'string' },
      })
      if (values.help) break
      return grants(positionals, values as { store?: string; deployment?: string; json?: boolean; replace?: boolean; output?: string })
    }
    case 'replay': {
      const { values, positionals } = parse(command, rest, {
        with: { type: 'string' },
        json: { type: 'boolean' },
        web: { type: 'string' },
        token: { type: 'string' },
      })
      if (values.help) break
      if (values.token !== undefined && values.web === undefined) throw new UsageError('faber replay: --token only applies with --web')
      if (typeof values.with !== 'string') throw new UsageError('faber replay: --with <deployment.yml> is required: the deployment to replay the logs through')
      if (!positionals.length) throw new UsageError('faber replay: name at least one session log\nUsage: faber replay <session.jsonl>… --with <deployment.yml>')
      const spec = await loadDeploymentFile(values.with)
      const { replay, replayExitCode } = await import('./replay.ts')
      const { renderReplay } = await import('./replay-report.ts')
      const spinner = new Spinner(process.stderr)
      const print = (report: ReplayReport) => {
        spinner.stop()
        process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${renderReplay(report, styleFor(values))}\n`)
      }
      // with --web the report is printed, then the view of the replay's deployment is served until Ctrl-C
      const hold =
        values.web === undefined
          ? undefined
          : async (deployed: Deployed, report: ReplayReport) => {
              print(report)
              const view = await serveWeb(command, deployed, values, process.stderr, { replay: report })
              process.stderr.write('faber replay: the view stays until Ctrl-C\n')
              await untilSignal()
              await view?.close()
            }
      let shown = 0
      const report = await quietly(() =>
        replay(positionals, spec, {
          onProgress: ({ calls, bytes, totalBytes }) => {
            if (calls - shown < 500) return
            shown = calls
            spinner.start(`replaying: ${calls} calls, ${Math.floor((100 * bytes) / Math.max(1, totalBytes))}% of the log(s)`)
          },
          hold,
        }),
      ).finally(() => spinner.stop())
      if (!hold) print(report)
      return replayExitCode(report)
    }
    case 'demo': {
      const { values } = parse(command, rest, {
        json: { type: 'boolean' },
        keep: { type: 'boolean' },
        log: { type: 'string' },
        web: { type: 'string' },
        token: { type: 'string' },
      })
      if (values.help) break
      const log = typeof values.log === 'string' ? resolve(values.log) : undefined
      if (values.token !== undefined && values.web === undefined) throw new UsageError('faber demo: --token only applies with --web')
      const web =
        values.web === undefined ? undefined : { ...(await listenArg(command, values.web)), token: values.token as string | undefined, hold: untilSignal }
      return runDemo({ json: Boolean(values.json), keep: Boolean(values.keep), log, style: styleFor(values), web })
    }
    case 'run': {
      const { values, positionals } = parse(command, rest, {
        json: { type: 'boolean' },
        verbose: { type: 'boolean' },
        'base-url': { type: 'string' },
        model: { type: 'string' },
        web: { type: 'string' },
        token: { type: 'string' },
      })
      if (values.help) break
      const spec = await loadDeploymentFile(deploymentArg(command, positionals))
      const deployed = await composeReported(spec)
      try {
        await serveWeb(command, deployed, values, values.json ? process.stderr : process.stdout)
        const model = createModel(overrideModel(spec, values), spec.source)
        return await chat(deployed, { model, ...chatOptions(command, values) })
      } finally {
        await deployed.stop()
      }
    }
    case 'chat': {
      const { values, positionals } = parse(command, rest, {
        provider: { type: 'string' },
        'base-url': { type: 'string' },
        model: { type: 'string' },
        'api-key-env': { type: 'string' },
        root: { type: 'string' },
        mode: { type: 'string' },
        log: { type: 'string' },
        json: { type: 'boolean' },
        verbose: { type: 'boolean' },
        web: { type: 'string' },
        token: { type: 'string' },
      })
      if (values.help) break
      if (positionals.length > 1) throw new UsageError(`faber chat: expected at most one deployment file, got ${positionals.length}`)
      // a deployment file named, or ./faber.yml (./faber.yaml) when there is one and --root / --mode do not ask for
      // the standard deployment: the file's plugins, agents and session
      const standard = values.root !== undefined || values.mode !== undefined
      const file = positionals[0] ?? (standard ? undefined : defaultDeployment())
      const env = process.env
      const provider = (values.provider as string | undefined) ?? env.FABER_PROVIDER ?? 'openai'
      if (provider !== 'openai' && provider !== 'anthropic') throw new UsageError(`faber chat: --provider: expected openai or anthropic but got "${provider}"`)
      const baseURL = (values['base-url'] as string | undefined) ?? env.FABER_BASE_URL
      const modelName = (values.model as string | undefined) ?? env.FABER_MODEL
      if (!modelName && !file) throw new UsageError('faber chat: no model given; pass --model NAME or set FABER_MODEL')
      const providerKey = provider === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY'
      const keyEnv = (values['api-key-env'] as string | undefined) ?? (env.FABER_API_KEY ? 'FABER_API_KEY' : providerKey)
      const apiKey = env[keyEnv]
      if (!apiKey && values['api-key-env']) throw new UsageError(`faber chat: the environment variable ${keyEnv} is not set`)
      let spec: DeploymentSpec
      if (file) {
        if (standard) throw new UsageError(`faber chat: --root and --mode shape the standard deployment, not ${file}; set them in the file`)
        spec = await loadDeploymentFile(file)
        if (typeof values.log === 'string') spec.session.log = resolve(values.log)
      } else {
        const root = resolve((values.root as string | undefined) ?? process.cwd())
        spec = readDeployment(
          {
            mode: values.mode ?? 'code',
            session: { log: values.log, context: `Workspace: ${root}. Paths given to the fs tools are relative to it.` },
          },
          'faber chat',
          process.cwd(),
        )
        spec.plugins = standardStack({ root, approval: { policy: 'auto', require: ['write', 'edit'] }, terminal: true })
      }
      const deployed = await composeReported(spec)
      try {
        await serveWeb(command, deployed, values, values.json ? process.stderr : process.stdout)
        const model = !modelName
          ? createModel(spec.model, spec.source)
          : provider === 'anthropic'
            ? new AnthropicModel({ model: modelName, apiKey, ...given({ baseURL }) })
            : new OpenAIChatModel({ baseURL: baseURL ?? 'https://api.openai.com/v1', model: modelName, apiKey })
        return await chat(deployed, { model, ...chatOptions(command, values) })
      } finally {
        await deployed.stop()
      }
    }
    case 'inspect': {
      const { values, positionals } = parse(command, rest, { json: { type: 'boolean' }, web: { type: 'string' }, token: { type: 'string' } })
      if (values.help) break
      if (values.web !== undefined && values.json) throw new UsageError('faber inspect: --json prints the report once; --web serves it live: pick one')
      // a plugin that did not start is shown, not thrown: the report says the deployment is not in force (exit 2)
      const deployed = await composeFile(deploymentArg(command, positionals), { keepFaults: true })
      try {
        const view = await serveWeb(command, deployed, values)
        if (view) {
          // the deployment keeps running (its plugins at work, calls and approvals live on the page) until Ctrl-C
          process.stdout.write('faber inspect: the deployment runs until Ctrl-C\n')
          await untilSignal()
          await view.close()
          return 0
        }
        const { inspect, renderReport } = await import('@faber/plugin-tool-cordis')
        const report = inspect(deployed.ctx)
        process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${renderReport(report)}\n`)
        if (report.deployment.inForce) return 0
        // the report shows it; stderr says which plugin, where the file loads it, and why (exit 2)
        await deployed.check()
        return 2
      } finally {
        await deployed.stop()
      }
    }
    case 'mcp': {
      const { values, positionals } = parse(command, rest, {
        agent: { type: 'string' },
        http: { type: 'string' },
        'allow-host': { type: 'string', multiple: true },
        'max-message-bytes': { type: 'string' },
        'session-log': { type: 'string' },
        web: { type: 'string' },
        token: { type: 'string' },
        fresh: { type: 'boolean' },
      })
      if (values.help) break
      if (positionals[0] === 'login' || positionals[0] === 'logout') {
        const [action, server, ...files] = positionals as ['login' | 'logout', string | undefined, ...string[]]
        return mcpLogin(action, server, deploymentArg(`mcp ${action}`, files), { fresh: Boolean(values.fresh) })
      }
      if (values.fresh) throw new UsageError('faber mcp: --fresh only applies to faber mcp login')
      const listen = typeof values.http === 'string' ? parseListen(values.http) : undefined
      const maxMessageBytes = values['max-message-bytes'] === undefined ? undefined : Number(values['max-message-bytes'])
      if (maxMessageBytes !== undefined && !(Number.isSafeInteger(maxMessageBytes) && maxMessageBytes > 0))
        throw new UsageError(`faber mcp: --max-message-bytes takes a positive whole number of bytes, got "${values['max-message-bytes']}"`)
      if (values['allow-host'] && !listen) throw new UsageError('faber mcp: --allow-host only applies with --http')
      // stdout belongs to the protocol on stdio: logs go to stderr
      const deployed = await composeFile(deploymentArg(command, positionals))
      let log: SessionLog | undefined
      let calls: CallLog | undefined
      try {
        const mcp = await import('@faber/plugin-mcp')
        const named = values.agent as string | undefined
        if (named !== undefined && !deployed.agents.has(named)) {
          const known = [...deployed.agents.keys()]
          throw new UsageError(
            `faber mcp: --agent: ${deployed.spec.source} has no agent named "${named}"; ${known.length ? `its agents: ${known.join(', ')}` : 'it defines no agents (leave out --agent to serve the global view)'}`,
          )
        }
        const agent = named === undefined ? deployed.agent : deployed.agents.get(named)
        const path = typeof values['session-log'] === 'string' ? resolve(values['session-log']) : deployed.spec.session.log
        if (path) {
          log = await SessionLog.open(path)
          if (log.truncated)
            process.stderr.write(`faber mcp: ${log.path}: its last line was cut short by a crash and was skipped (line ${log.truncated.line})\n`)
          calls = new CallLog(deployed.ctx, { agent, log, model: 'mcp', turn: () => 0 })
          const waiting = [...calls.checkpointed.values()]
          // the programs a client may still call again; each question they left in the store expires at its deadline
          if (waiting.length)
            process.stderr.write(
              `faber mcp: ${log.path} holds ${waiting.length} run_code program(s) checkpointed while waiting on a person (${waiting.map((w) => w.outerCallId).join(', ')}): a client calling run_code again with the same arguments has it run again from the log\n`,
            )
        }
        // stdout belongs to the protocol on stdio
        await serveWeb(command, deployed, values, listen ? process.stdout : process.stderr)
        if (listen) {
          // stdout says where to connect; logs go to stderr as on stdio
          mcp.logsToStderr()
          const extra = (values['allow-host'] as string[] | undefined) ?? []
          const allowedHosts = extra.length ? ['localhost', '127.0.0.1', '[::1]', listen.host, ...extra] : undefined
          const serving = await mcp.serveMcpHttp(deployed.ctx, { agent, ...listen, allowedHosts, maxMessageBytes, calls })
          process.stdout.write(`faber mcp: serving over MCP streamable HTTP at ${serving.url} (Ctrl-C stops)\n`)
          await untilSignal()
          await serving.close()
          return 0
        }
        const serving = await mcp.serveMcp(deployed.ctx, { agent, transport: 'stdio', maxMessageBytes, calls })
        const stop = () => serving.close()
        process.once('SIGINT', stop)
        process.once('SIGTERM', stop)
        await serving.closed
        return 0
      } finally {
        calls?.dispose()
        try {
          await log?.close()
        } finally {
          await deployed.stop()
        }
      }
    }
  }
  process.stdout.write(`${HELP[command]}\n`)
  return 0
}

/**
 * a reader that stops reading (faber demo | head, faber replay … | head): the rest of the output goes nowhere, and the
 * exit code stays the command's. unhandled, the failed write ended the process with a trace and 1, which from faber
 * replay says a policy became more permissive
 */
function readerGone(error: NodeJS.ErrnoException) {
  if (error.code !== 'EPIPE') throw error
}

async function run() {
  // --debug, anywhere on the line: stack traces and every log line
  const argv = process.argv.slice(2)
  const debug = argv.includes('--debug')
  process.stdout.on('error', readerGone)
  Logger.levels.base = Number(process.env.FABER_LOG_LEVEL ?? (debug ? 3 : 1))
  let code: number
  try {
    code = await main(argv.filter((a) => a !== '--debug'))
  } catch (error) {
    const known =
      error instanceof UsageError ||
      error instanceof DeploymentError ||
      error instanceof GrantsUsageError ||
      error instanceof McpLoginUsageError ||
      // what is wrong with the user's own store or session log, said in full by its message
      ['ReplayInputError', 'StoreError', 'SessionLogError', 'RecordedCallsError'].includes((error as Error)?.name)
    const message = messageOf(error)
    if (debug) process.stderr.write(`${(error as Error)?.stack ?? error}\n`)
    // a message may quote what a log or a file holds: its control characters are shown, not sent to the terminal
    else if (known) process.stderr.write(`${visible(message)}\n`)
    else process.stderr.write(`faber: ${visible(message)}\n(an unexpected failure: run it again with --debug for the stack trace)\n`)
    code = known ? 2 : 1
  }
  process.exitCode = code
  // the deployment is stopped by now; a handle some plugin left open must not keep the command alive
  setTimeout(() => process.exit(code), 2000).unref()
}

// run only as the entry point — the faber bin, or this file itself (src/main.ts under tsx, dist/main.js, which npm's
// bin links to) — not when a test or a user's program (say, their own main.js) imports main
const entry = process.argv[1] ?? ''
if (/(?:^|[\\/])faber(\.mjs)?$/.test(entry) || (existsSync(entry) && realpathSync(entry) === fileURLToPath(import.meta.url))) await run()
