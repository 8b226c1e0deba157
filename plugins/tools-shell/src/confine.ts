// how a command is started: inside bubblewrap (a user, mount, PID, network, IPC, UTS and cgroup namespace of its
// own, no capabilities, a new session) or, when the deployment says `confine: false`, directly. both put the command
// in a pids cgroup of its own when one can be made, which bounds its processes and lets every one of them be killed.

import { spawnSync } from 'node:child_process'
import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs'
import os from 'node:os'
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
  /** descriptors the command's process gets as 3, 4, … (bubblewrap consumes and closes them); closed here once it started */
  fds: number[]
}

const SYSTEM = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt']

/** a confined command's scratch directory, its `$TMPDIR` and `$HOME`: a tmpfs of its own, discarded when it ends */
export const SCRATCH = '/tmp/faber-scratch'

function bwrapPath(configured?: string): string | undefined {
  if (configured !== undefined) return existsSync(configured) ? configured : undefined
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

/** a `hide` entry as a path: `~` is this process's home directory, wherever it lies (its real path; never `/`) */
function hiddenPath(entry: string): string | undefined {
  if (entry !== '~' && !entry.startsWith('~/')) return entry
  try {
    const real = realpathSync(path.join(os.homedir(), entry.slice(1)))
    return real === '/' ? undefined : real
  } catch {}
}

/** the bubblewrap arguments that confine a command to `root`; `protectArgs`, then `--` and the command follow them */
export function bwrapArgs(root: string, shell: string, sandbox: SandboxConfig): string[] {
  const args = ['--unshare-all', '--die-with-parent', '--new-session', '--cap-drop', 'ALL']
  if (sandbox.network) args.push('--share-net')
  // the empty file systems made here, read-only once every mount point in them is made: a write outside the root
  // and the scratch directory fails ("Read-only file system") instead of landing in a tmpfs that vanishes
  const made: string[] = []
  if (sandbox.filesystem === 'readonly') {
    args.push('--ro-bind', '/', '/')
    // a symlink (/var/run -> /run) is hidden with its target
    for (const entry of sandbox.hide) {
      const hidden = hiddenPath(entry)
      if (hidden !== undefined && isDirectory(hidden)) {
        args.push('--tmpfs', hidden)
        made.push(hidden)
      }
    }
  } else {
    // the sandbox's own root, a tmpfs
    made.push('/')
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
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--tmpfs', SCRATCH)
  made.push('/tmp')
  // after /tmp's tmpfs, so a directory below it is not covered up
  for (const dir of sandbox.readOnly) args.push('--ro-bind-try', dir, dir)
  for (const dir of sandbox.writable) args.push('--bind-try', dir, dir)
  args.push('--bind', root, root)
  // not recursive: the mounts inside (the root, writable, the scratch directory) keep their own
  for (const dir of made) args.push('--remount-ro', dir)
  args.push('--chdir', root)
  if (!existsSync(shell)) throw new TypeError(`tools-shell: the shell "${shell}" does not exist; set the shell option`)
  return args
}

/**
 * opens `target` without following a symbolic link anywhere below `root`, for a bind that cannot be redirected: a
 * command may have planted a link at a protected path (`.faber -> ../../root`), and bubblewrap, given the path,
 * would follow it on the host and show the command whatever it names. undefined when it is absent, a link, below a
 * link, or neither a directory nor a file.
 */
function pin(root: string, target: string): number | undefined {
  let fd: number
  try {
    // O_NONBLOCK: a FIFO planted there must not hang the host
    fd = openSync(target, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return
  }
  try {
    const info = fstatSync(fd)
    // what the descriptor really names: a link in a parent directory shows here
    if ((info.isDirectory() || info.isFile()) && target.startsWith(root + path.sep) && readlinkSync(`/proc/self/fd/${fd}`) === target) return fd
  } catch {}
  closeSync(fd)
}

/**
 * the binds that keep `protect` read-only, each from a descriptor opened here (`pin`): the command's process gets
 * `fds[i]` as descriptor `firstFd + i`. the directories between the root and a protected path are bound onto
 * themselves, writable: a mount point cannot be renamed or removed, so a command cannot move `.git` aside and
 * make a new one. a path that does not exist when the command starts is not protected.
 */
export function protectArgs(root: string, protect: string[], firstFd = 3): { args: string[]; fds: number[] } {
  const readOnly = new Set<string>()
  const between = new Set<string>()
  for (const rel of protect) {
    const target = path.resolve(root, rel)
    if (!target.startsWith(root + path.sep)) continue
    readOnly.add(target)
    for (let dir = path.dirname(target); dir.startsWith(root + path.sep); dir = path.dirname(dir)) between.add(dir)
  }
  const depth = (p: string) => p.split(path.sep).length
  const args: string[] = []
  const fds: number[] = []
  const bind = (option: string, target: string) => {
    const fd = pin(root, target)
    if (fd === undefined) return false
    args.push(option, String(firstFd + fds.length), target)
    fds.push(fd)
    return true
  }
  // outermost first, so an inner bind lands on the outer one; a directory already read-only needs nothing more
  for (const dir of [...between].filter((dir) => !readOnly.has(dir)).sort((a, b) => depth(a) - depth(b))) {
    bind('--bind-fd', dir)
  }
  for (const target of [...readOnly].sort((a, b) => depth(a) - depth(b))) bind('--ro-bind-fd', target)
  return { args, fds }
}

export type Probe = { ok: true; bwrap: string } | { ok: false; why: string }

/** whether bubblewrap can confine a command here: it must exist and start a sandbox with these options */
export function probeBubblewrap(root: string, shell: string, sandbox: SandboxConfig, configured?: string): Probe {
  const bwrap = bwrapPath(configured)
  if (!bwrap) {
    if (configured !== undefined) return { ok: false, why: `bwrap was configured as "${configured}", which does not exist` }
    return { ok: false, why: 'bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)' }
  }
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
