// how a command is started: inside bubblewrap (a user, mount, PID, network, IPC, UTS and cgroup namespace of its
// own, no capabilities, a new session) or, when the deployment says `confine: false`, directly. both put the command
// in a pids cgroup of its own when one can be made, which bounds its processes and lets every one of them be killed.

import { spawnSync } from 'node:child_process'
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'

export interface SandboxConfig {
  /** `readonly`: the host's file system read-only, minus `hide`; `minimal`: only the system directories and `readOnly` */
  filesystem: 'readonly' | 'minimal'
  network: boolean
  hide: string[]
  readOnly: string[]
  writable: string[]
  protect: string[]
}

export interface Launch {
  file: string
  args: string[]
}

const SYSTEM = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt']

function bwrapPath(): string | undefined {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    const candidate = path.join(dir || '.', 'bwrap')
    if (existsSync(candidate)) return candidate
  }
}

function isDirectory(dir: string) {
  try {
    return lstatSync(dir).isDirectory()
  } catch {
    return false
  }
}

/** the bubblewrap arguments that confine a command to `root`; `--` and the command follow them */
export function bwrapArgs(root: string, shell: string, sandbox: SandboxConfig): string[] {
  const args = ['--unshare-all', '--die-with-parent', '--new-session', '--cap-drop', 'ALL']
  if (sandbox.network) args.push('--share-net')
  if (sandbox.filesystem === 'readonly') {
    args.push('--ro-bind', '/', '/')
    // a symlink (/var/run -> /run) is hidden with its target
    for (const hidden of sandbox.hide) if (isDirectory(hidden)) args.push('--tmpfs', hidden)
  } else {
    for (const dir of SYSTEM) {
      let info: ReturnType<typeof lstatSync>
      try {
        info = lstatSync(dir)
      } catch {
        continue
      }
      // merged-/usr systems have /bin -> usr/bin: recreate the link rather than bind its target twice
      if (info.isSymbolicLink()) args.push('--symlink', readlinkSync(dir), dir)
      else args.push('--ro-bind', dir, dir)
    }
  }
  // a fresh /proc shows only the sandbox's PID namespace; /dev holds only the harmless devices
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp')
  // after /tmp's tmpfs, so a directory below it is not covered up
  for (const dir of sandbox.readOnly) args.push('--ro-bind-try', dir, dir)
  for (const dir of sandbox.writable) args.push('--bind-try', dir, dir)
  args.push('--bind', root, root)
  for (const rel of sandbox.protect) {
    const target = path.resolve(root, rel)
    if (target.startsWith(root + path.sep) && existsSync(target)) args.push('--ro-bind', target, target)
  }
  args.push('--chdir', root)
  if (!existsSync(shell)) throw new TypeError(`tools-shell: the shell "${shell}" does not exist; set the shell option`)
  return args
}

export type Probe = { ok: true; bwrap: string } | { ok: false; why: string }

/** whether bubblewrap can confine a command here: it must exist and start a sandbox with these options */
export function probeBubblewrap(root: string, shell: string, sandbox: SandboxConfig): Probe {
  const bwrap = bwrapPath()
  if (!bwrap) return { ok: false, why: 'bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)' }
  const result = spawnSync(bwrap, [...bwrapArgs(root, shell, sandbox), '--', shell, '-c', 'exit 0'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10000 })
  if (result.status === 0) return { ok: true, bwrap }
  const stderr = result.stderr?.toString().trim()
  return {
    ok: false,
    why: `bwrap could not start a sandbox${stderr ? `: ${stderr}` : ''} (one cause: user namespaces are disabled, as in some containers)`,
  }
}

// ---- the pids cgroup

export interface Cgroups {
  /** a cgroup for one command, limited to `max` processes; undefined when none can be made */
  create(max: number): Cgroup | undefined
  /** how commands are limited, for the status line */
  readonly description: string
}

export interface Cgroup {
  readonly procs: string
  /** kills every process in it; true when it is empty afterwards */
  killAll(): boolean
  remove(): void
}

let sequence = 0

/** finds a pids cgroup this process may create children in: cgroup v1's pids hierarchy, or a v2 one with pids enabled */
export function findCgroups(): Cgroups {
  let base: string | undefined
  let version: 'v1' | 'v2' | undefined
  try {
    const lines = readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')
    const v1 = lines.map((line) => line.split(':')).find(([, controllers]) => controllers.split(',').includes('pids'))
    if (v1 && existsSync('/sys/fs/cgroup/pids')) {
      base = path.join('/sys/fs/cgroup/pids', v1[2])
      version = 'v1'
    } else {
      const v2 = lines.find((line) => line.startsWith('0::'))
      const mount = existsSync('/sys/fs/cgroup/cgroup.controllers') ? '/sys/fs/cgroup' : undefined
      if (v2 && mount) {
        base = path.join(mount, v2.slice(3))
        version = 'v2'
      }
    }
  } catch {}
  const none: Cgroups = { create: () => undefined, description: 'not limited (no pids cgroup this process can create children in)' }
  if (!base || !version) return none
  const make = (max: number): Cgroup | undefined => {
    const dir = path.join(base, `faber-shell-${process.pid}-${++sequence}`)
    try {
      mkdirSync(dir)
    } catch {
      return
    }
    try {
      writeFileSync(path.join(dir, 'pids.max'), String(max))
    } catch {
      try {
        rmdirSync(dir)
      } catch {}
      return
    }
    return {
      procs: path.join(dir, 'cgroup.procs'),
      killAll() {
        for (let round = 0; round < 20; round++) {
          let pids: number[]
          try {
            pids = readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number)
          } catch {
            return true
          }
          if (!pids.length) return true
          for (const pid of pids) {
            try {
              process.kill(pid, 'SIGKILL')
            } catch {}
          }
        }
        return false
      },
      remove() {
        // zombies not yet reaped keep it busy for a moment
        const attempt = (left: number) => {
          try {
            rmdirSync(dir)
          } catch {
            if (left > 0) setTimeout(() => attempt(left - 1), 100).unref()
          }
        }
        attempt(20)
      },
    }
  }
  // try once now, so the status says what will happen
  const trial = make(1)
  if (!trial) return none
  trial.remove()
  return { create: make, description: `limited per command by a pids cgroup (${version})` }
}
