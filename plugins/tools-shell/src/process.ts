// one command as a process tree: started in a new session (its own process group) and, when possible, its own pids
// cgroup; its output captured within caps; stopped by killing the whole group and cgroup, never just the shell.

import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync } from 'node:fs'
import { Capture, type Captured } from './capture.ts'
import type { Cgroup, Cgroups, Launch } from './confine.ts'

// runs before the command, in the shell, then execs it: joins the command's cgroup (before anything can fork) and
// closes every descriptor above $1 (stdio, and those bubblewrap binds from and then closes). node marks its own
// descriptors close-on-exec, but not ones this process inherited from whatever started it, and neither node nor
// bubblewrap closes those
const LAUNCHER = [
  '[ "$0" = - ] || echo $$ > "$0" || exit 126',
  'keep=$1; shift',
  // no redirection around this loop: bash would keep a saved copy of stderr open above 2 and lose it here
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion
  'for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -le "$keep" ] || eval "exec $fd>&-"; done',
  'exec "$@"',
].join('\n')

export interface Limits {
  /** bytes kept from the start and from the end of each stream (per window, for jobs) */
  headBytes: number
  tailBytes: number
  /** how long SIGTERM has before SIGKILL */
  killGraceMs: number
  maxProcesses: number
}

export type Ending = 'exited' | 'signaled' | 'timed-out' | 'stopped'

export interface Exit {
  status: Ending
  exitCode?: number
  signal?: string
}

export class CommandProcess {
  readonly stdout: Capture
  readonly stderr: Capture
  readonly started = Date.now()
  /** settles when the process has exited and its output is drained */
  readonly done: Promise<Exit>
  exit?: Exit
  private child: ChildProcess
  private cgroup?: Cgroup
  private reason?: 'timed-out' | 'stopped'
  private killTimer?: NodeJS.Timeout

  constructor(shell: string, launch: Launch, cwd: string, env: NodeJS.ProcessEnv, limits: Limits, cgroups: Cgroups) {
    this.stdout = new Capture(limits.headBytes, limits.tailBytes)
    this.stderr = new Capture(limits.headBytes, limits.tailBytes)
    this.cgroup = cgroups.create(limits.maxProcesses)
    const keep = String(2 + launch.fds.length)
    try {
      // detached: a new session and process group, so the group can be killed as one
      this.child = spawn(shell, ['--norc', '--noprofile', '-c', LAUNCHER, this.cgroup?.procs ?? '-', keep, launch.file, ...launch.args], {
        cwd,
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe', ...launch.fds],
      })
    } catch (error) {
      this.cgroup?.remove()
      throw error
    } finally {
      for (const fd of launch.fds) closeSync(fd)
    }
    this.child.stdout!.on('data', (chunk: Buffer) => this.stdout.push(chunk))
    this.child.stderr!.on('data', (chunk: Buffer) => this.stderr.push(chunk))
    this.done = new Promise<Exit>((resolve) => {
      let exited: Exit | undefined
      const finish = () => {
        clearTimeout(this.killTimer)
        this.exit = exited ?? { status: this.reason ?? 'signaled', signal: 'SIGKILL' }
        this.cgroup?.remove()
        resolve(this.exit)
      }
      this.child.on('error', (error) => {
        this.stderr.push(Buffer.from(`tools-shell: the command could not be started: ${error.message}\n`))
        exited = { status: 'exited', exitCode: 127 }
        finish()
      })
      this.child.on('exit', (code, signal) => {
        exited = this.reason ? { status: this.reason } : signal ? { status: 'signaled' } : { status: 'exited' }
        if (code !== null) exited.exitCode = code
        if (signal) exited.signal = signal
        // the command is over: whatever it left running in its group or cgroup goes with it (use background mode
        // for long-running work), and the pipes those leftovers hold are then closed
        this.killTree('SIGKILL')
        const drained = setTimeout(() => {
          this.child.stdout?.destroy()
          this.child.stderr?.destroy()
          finish()
        }, 1000)
        this.child.once('close', () => {
          clearTimeout(drained)
          finish()
        })
      })
    })
  }

  get pid() {
    return this.child.pid
  }

  get running() {
    return this.exit === undefined
  }

  /** stops the command: SIGTERM to the whole tree, SIGKILL after the grace period */
  stop(reason: 'timed-out' | 'stopped', graceMs: number) {
    if (this.exit || this.reason) return
    this.reason = reason
    this.killTree('SIGTERM')
    this.killTimer = setTimeout(() => this.killTree('SIGKILL'), graceMs)
    this.killTimer.unref?.()
  }

  /** kills at once, for dispose */
  kill() {
    if (this.exit) return
    this.reason ??= 'stopped'
    this.killTree('SIGKILL')
  }

  private killTree(signal: NodeJS.Signals) {
    const pid = this.child.pid
    if (pid !== undefined) {
      try {
        process.kill(-pid, signal)
      } catch {}
    }
    // a process that left the group (setsid) is still in the cgroup
    if (signal === 'SIGKILL') this.cgroup?.killAll()
  }

  take(): { stdout: Captured; stderr: Captured } {
    return { stdout: this.stdout.take(), stderr: this.stderr.take() }
  }
}
