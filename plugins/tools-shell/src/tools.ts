// the three tool definitions: the command itself, and reading and stopping a background job.

import { type Agent, defineTool, type Execution, type Infer, type ToolDefinition, t } from '@faber/core'
import type { Captured } from './capture.ts'
import type { Cgroups, Launch } from './confine.ts'
import { CommandProcess, type Exit, type Limits } from './process.ts'

export class ShellError extends Error {
  constructor(
    readonly code: 'SHELL_NO_SUCH_JOB' | 'SHELL_TOO_MANY_JOBS' | 'SHELL_COMMAND_TOO_LONG',
    message: string,
  ) {
    super(message)
    this.name = 'ShellError'
  }
}

// linux's MAX_ARG_STRLEN (32 pages) less the terminating NUL: the command is one argument of bubblewrap and of bash
const MAX_COMMAND_BYTES = 131_071

export interface ShellOptions {
  name: string
  root: string
  /** bash: it runs the launcher and, unconfined or inside bubblewrap, the command */
  shell: string
  env: NodeJS.ProcessEnv
  launch(command: string): Launch
  cgroups: Cgroups
  limits: Limits
  timeoutMs: number
  maxTimeoutMs: number
  maxJobs: number
  maxJobMs: number
  annotations: Record<string, unknown>
  /** how commands run, for the inspector: confined by what, or not */
  status: string
  /** confined: where a command may write, for the model; told in the description and beside a read-only failure */
  confinement?: string
}

interface Job {
  id: string
  command: string
  agent?: Agent
  /** the conversation it was started in, when its agent serves several (an MCP session: exec.session) */
  session?: string
  process: CommandProcess
  forget: () => void
}

const outcome = t.object({
  status: t
    .enum(['exited', 'signaled', 'timed-out', 'stopped', 'running'])
    .describe('exited: it ended by itself; signaled: a signal killed it; timed-out / stopped: it was killed; running: a background job still runs'),
  exitCode: t.integer().describe('the exit code, when it exited').optional(),
  signal: t.string().describe('the signal that ended it, e.g. SIGKILL').optional(),
  stdout: t.string().describe('standard output; when long, its start and end with the middle elided'),
  stderr: t.string().describe('standard error, capped the same way'),
  stdoutBytes: t.integer().describe('bytes written to standard output (since the last read, for a job)'),
  stderrBytes: t.integer(),
  durationMs: t.integer(),
  jobId: t.string().describe('the background job, for the output and stop tools').optional(),
})

export type Outcome = Infer<typeof outcome>

function seconds(ms: number) {
  return ms < 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`
}

function render(tools: { output: string }, confinement: string | undefined) {
  return (_: unknown, v: Outcome) => {
    let head: string
    if (v.status === 'running') head = `job ${v.jobId} is running (${seconds(v.durationMs)} so far); read more with ${tools.output}`
    else if (v.status === 'exited') head = `exit code ${v.exitCode}`
    else if (v.status === 'timed-out') head = `timed out after ${seconds(v.durationMs)}; the command and everything it started were killed`
    else if (v.status === 'stopped') head = 'stopped; the command and everything it started were killed'
    else head = `killed by ${v.signal}`
    if (v.status !== 'running') head += ` (${seconds(v.durationMs)}${v.jobId ? `, job ${v.jobId}` : ''})`
    const parts = [head]
    // the final newline of a stream is the line break before the next part
    if (v.stdout) parts.push(`stdout:\n${v.stdout.replace(/\n$/, '')}`)
    if (v.stderr) parts.push(`stderr:\n${v.stderr.replace(/\n$/, '')}`)
    if (!v.stdout && !v.stderr) parts.push(v.status === 'running' ? '(no new output)' : '(no output)')
    // the write the command attempted did not happen: say why, and where it can write
    if (confinement && v.stderr.includes('Read-only file system')) parts.push(`note: ${confinement}`)
    return parts.join('\n')
  }
}

function outcomeOf(exit: Exit | undefined, output: { stdout: Captured; stderr: Captured }, started: number, jobId?: string): Outcome {
  const value: Outcome = {
    status: exit?.status ?? 'running',
    stdout: output.stdout.text,
    stderr: output.stderr.text,
    stdoutBytes: output.stdout.bytes,
    stderrBytes: output.stderr.bytes,
    durationMs: Date.now() - started,
  }
  if (exit?.exitCode !== undefined) value.exitCode = exit.exitCode
  if (exit?.signal !== undefined) value.signal = exit.signal
  if (jobId !== undefined) value.jobId = jobId
  return value
}

/** the tools and the job table; `dispose` kills every job */
export function shellTools(options: ShellOptions): {
  tools: ToolDefinition[]
  endJobsOf(agent: Agent | undefined, session?: string): void
  dispose(): void
} {
  const { name, limits } = options
  const names = { output: `${name}_output`, stop: `${name}_stop` }
  const jobs = new Map<string, Job>()
  let sequence = 0

  const start = (command: string) => {
    const bytes = Buffer.byteLength(command)
    if (bytes > MAX_COMMAND_BYTES) {
      throw new ShellError(
        'SHELL_COMMAND_TOO_LONG',
        `the command is ${bytes} bytes, more than the ${MAX_COMMAND_BYTES} the kernel allows one argument; ` +
          'write it to a script file in the workspace and run that file instead',
      )
    }
    return new CommandProcess(options.shell, options.launch(command), options.root, options.env, limits, options.cgroups)
  }

  // a job belongs to the conversation that started it: its agent's, or one MCP session of its agent's
  const ours = (job: Job, exec: Execution) => job.agent === exec.agent && job.session === exec.session
  const jobOf = (id: string, exec: Execution) => {
    const job = jobs.get(id)
    // another conversation's job is as unknown as one that never was
    if (!job || !ours(job, exec)) {
      const list = [...jobs.values()].filter((j) => ours(j, exec)).map((j) => j.id)
      throw new ShellError('SHELL_NO_SUCH_JOB', `there is no job "${id}"${list.length ? `; your jobs: ${list.join(', ')}` : ''}`)
    }
    return job
  }

  const bash = defineTool({
    name,
    description:
      `Run a bash command in the workspace (${options.root}) and return its exit code and output. ` +
      `It is killed after timeoutMs (default ${seconds(options.timeoutMs)}, at most ${seconds(options.maxTimeoutMs)}), ` +
      'and processes it leaves behind are killed when it ends. Long output keeps its start and end. ' +
      `For servers and watchers set background: true and read the job with ${names.output}; stop it with ${names.stop}.` +
      (options.confinement ? ` ${options.confinement}` : ''),
    parameters: t.object({
      command: t.string({ minLength: 1 }).describe('the bash command line'),
      timeoutMs: t.integer({ minimum: 1, maximum: options.maxTimeoutMs }).describe('kill it after this many milliseconds').optional(),
      background: t.boolean().describe(`run as a background job and return its id at once (read it with ${names.output})`).optional(),
    }),
    output: { schema: outcome, render: render(names, options.confinement) },
    isConcurrencySafe: () => false,
    // a backstop for timeout wrappers such as guards': the tool enforces its own timeout first
    timeoutMs: options.maxTimeoutMs + limits.killGraceMs + 5000,
    // the status (confined or not) is said once, on the command tool
    annotations: { destructive: true, openWorld: true, ...options.annotations, status: options.status },
    async execute(args, run) {
      if (args.background) {
        const running = [...jobs.values()].filter((job) => job.process.running).length
        if (running >= options.maxJobs) {
          throw new ShellError('SHELL_TOO_MANY_JOBS', `${running} background jobs are running, the most allowed; stop one with ${names.stop} first`)
        }
        const process = start(args.command)
        const id = `job-${++sequence}`
        const lifetime = setTimeout(() => process.stop('timed-out', limits.killGraceMs), options.maxJobMs)
        lifetime.unref()
        const agent = run.exec.agent
        const off = agent?.ctx.on('dispose', () => process.kill())
        const forget = () => {
          clearTimeout(lifetime)
          off?.()
        }
        const job: Job = { id, command: args.command, agent, session: run.exec.session, process, forget }
        jobs.set(id, job)
        void process.done.then(job.forget)
        return outcomeOf(undefined, { stdout: { text: '', bytes: 0, elided: 0 }, stderr: { text: '', bytes: 0, elided: 0 } }, process.started, id)
      }
      const process = start(args.command)
      const timer = setTimeout(() => process.stop('timed-out', limits.killGraceMs), Math.min(args.timeoutMs ?? options.timeoutMs, options.maxTimeoutMs))
      const abort = () => process.kill()
      run.signal.addEventListener('abort', abort, { once: true })
      if (run.signal.aborted) abort()
      try {
        const exit = await process.done
        return outcomeOf(exit, process.take(), process.started)
      } finally {
        clearTimeout(timer)
        run.signal.removeEventListener('abort', abort)
      }
    },
  })

  const output = defineTool({
    name: names.output,
    description:
      `Read what a background job of ${name} printed since the last read, and whether it still runs. ` +
      'waitMs waits up to that long for it to end first (returning early when it does).',
    parameters: t.object({
      jobId: t.string({ minLength: 1 }),
      waitMs: t.integer({ minimum: 0, maximum: 60000 }).describe('wait up to this long for the job to end before reading').optional(),
    }),
    output: { schema: outcome, render: render(names, options.confinement) },
    isConcurrencySafe: () => true,
    annotations: { readOnly: true, ...options.annotations },
    async execute(args, run) {
      const job = jobOf(args.jobId, run.exec)
      if (args.waitMs && job.process.running) {
        let timer: NodeJS.Timeout | undefined
        let abort!: () => void
        await Promise.race([
          job.process.done,
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, args.waitMs)
            abort = resolve
            run.signal.addEventListener('abort', abort, { once: true })
          }),
        ])
        clearTimeout(timer)
        run.signal.removeEventListener('abort', abort)
      }
      const value = outcomeOf(job.process.exit, job.process.take(), job.process.started, job.id)
      if (!job.process.running) jobs.delete(job.id)
      return value
    },
  })

  const stop = defineTool({
    name: names.stop,
    description: `Stop a background job of ${name}: it and everything it started are killed. Returns its last output.`,
    parameters: t.object({ jobId: t.string({ minLength: 1 }) }),
    output: { schema: outcome, render: render(names, options.confinement) },
    isConcurrencySafe: () => false,
    annotations: { destructive: true, idempotent: true, ...options.annotations },
    async execute(args, run) {
      const job = jobOf(args.jobId, run.exec)
      job.process.stop('stopped', limits.killGraceMs)
      const exit = await job.process.done
      jobs.delete(job.id)
      return outcomeOf(exit, job.process.take(), job.process.started, job.id)
    },
  })

  return {
    tools: [bash, output, stop] as ToolDefinition[],
    endJobsOf(agent, session) {
      for (const job of jobs.values()) {
        if (job.agent !== agent || (session !== undefined && job.session !== session)) continue
        job.process.kill()
        job.forget()
        jobs.delete(job.id)
      }
    },
    dispose() {
      for (const job of jobs.values()) {
        job.process.kill()
        job.forget()
      }
      jobs.clear()
    },
  }
}
