import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { appendFile, copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { defineTool, t } from '@faber/core'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema, type ElicitResult } from '@modelcontextprotocol/sdk/types.js'
import { expect } from 'chai'
import type { Context } from 'cordis'

export const BIN = fileURLToPath(new URL('../bin/faber.mjs', import.meta.url))

const EXAMPLE = fileURLToPath(new URL('../../../examples/deployment/', import.meta.url))

/** a fresh temp dir holding examples/deployment's faber.yml exactly as shipped, next to a copy of its workspace */
export async function exampleCopy(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  await mkdir(join(dir, 'workspace'))
  await copyFile(join(EXAMPLE, 'faber.yml'), join(dir, 'faber.yml'))
  await copyFile(join(EXAMPLE, 'workspace', 'NOTES.md'), join(dir, 'workspace', 'NOTES.md'))
  return dir
}

/** a program that reads the example's notes and tries to write `content` to SUMMARY.md: the lines read, and the path written or why not */
export function summaryProgram(content: string): string {
  return `const notes = await tools.read({ path: 'NOTES.md' })
let wrote = 'not written'
try {
  wrote = (await tools.write({ path: 'SUMMARY.md', content: ${JSON.stringify(content)} })).path
} catch (error) {
  wrote = String(error.message)
}
return { lines: notes.totalLines, wrote }`
}

export interface Ran {
  code: number | null
  stdout: string
  stderr: string
  ms: number
}

/** runs the real `faber` bin as a child process, stdin from `input` (then closed), output piped */
export function faber(args: string[], options: { input?: string; env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {}): Promise<Ran> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd,
      env: { ...process.env, NO_COLOR: undefined, FORCE_COLOR: undefined, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 30_000)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr, ms: performance.now() - started })
    })
    child.stdin.end(options.input ?? '')
  })
}

/** runs the real `faber` bin with its stdout's reader gone before anything is written (`faber … | head`): each write fails (EPIPE) */
export function faberReaderGone(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.destroy()
  let stderr = ''
  child.stderr.on('data', (chunk) => (stderr += chunk))
  return new Promise((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stderr }))
  })
}

export interface Serving {
  readonly child: ChildProcessWithoutNullStreams
  /** the address the command printed; rejects if it exits first */
  readonly url: Promise<string>
  /** what it wrote to stderr so far */
  stderr(): string
}

/** starts the real `faber` bin as a server that runs until killed; `pattern`'s first group, on a line of its stdout, is its address */
export function serving(args: string[], pattern: RegExp): Serving {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const url = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const found = pattern.exec(line)
      if (found) resolve(found[1])
    })
    child.on('close', (code) => reject(new Error(`faber ${args.join(' ')} exited with ${code}: ${stderr}`)))
  })
  return { child, url, stderr: () => stderr }
}

export interface McpHttp {
  /** the temp dir: deploy.yml, and the workspace ws/ holding notes.txt ("hello") */
  readonly dir: string
  readonly url: string
  /** what the server wrote to stderr so far */
  stderr(): string
  /** an official SDK client of a new session, closed after the test; `answer` answers its elicitations, `asked` their messages */
  client(answer?: ElicitResult): Promise<Client & { asked: string[] }>
}

/**
 * for a describe: `faber mcp deploy.yml --http` started before its tests on `deployment` in a fresh temp dir (`${dir}`
 * in it is that dir), which is removed after; the server must exit 0 on SIGTERM
 */
export function mcpOverHttp(deployment: string): McpHttp {
  let dir = ''
  let url = ''
  let served: Serving
  const clients: Client[] = []
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'faber-mcp-http-'))
    await mkdir(join(dir, 'ws'))
    await writeFile(join(dir, 'ws', 'notes.txt'), 'hello\n')
    await writeFile(join(dir, 'deploy.yml'), deployment)
    served = serving(['mcp', join(dir, 'deploy.yml'), '--http', '127.0.0.1:0'], /at (http:\/\/\S+\/mcp)/)
    url = await served.url
  })
  afterEach(() => Promise.all(clients.splice(0).map((client) => client.close())))
  after(async () => {
    const exited = new Promise((resolve) => served.child.on('close', resolve))
    served.child.kill('SIGTERM')
    expect(await exited).to.equal(0)
    await rm(dir, { recursive: true, force: true })
  })
  return {
    get dir() {
      return dir
    },
    get url() {
      return url
    },
    stderr: () => served.stderr(),
    async client(answer) {
      const client = new Client({ name: 'test', version: '1.0.0' }, { capabilities: answer ? { elicitation: {} } : {} })
      const asked: string[] = []
      if (answer)
        client.setRequestHandler(ElicitRequestSchema, (request) => {
          asked.push(request.params.message)
          return answer
        })
      await client.connect(new StreamableHTTPClientTransport(new URL(url)))
      clients.push(client)
      return Object.assign(client, { asked })
    },
  }
}

/**
 * the head of a deployment whose run_code programs are checkpointed after waiting 200 ms on a person: `backend` with
 * one unit, tools-fs over `${dir}/ws`, the store `${dir}/faber.db`; the plugins that follow it are the caller's lines
 */
export function checkpointing(backend: string): string {
  return `mode: code
core: { checkpointAfterMs: 200 }
plugins:
  '${backend}': { poolSize: 1 }
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
  '@faber/store': { path: '\${dir}/faber.db' }
`
}

export function jsonLines(text: string): Record<string, any>[] {
  return text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l))
}

export interface Pty {
  /** everything the command wrote to the terminal so far */
  readonly output: string
  /** resolves with the output once it holds `text` `times` times (default once), or rejects after `timeoutMs` */
  until(text: string | RegExp, options?: { times?: number; timeoutMs?: number }): Promise<string>
  type(text: string): void
  /** the command's exit code (util-linux `script -e` passes it on) */
  exited: Promise<number | null>
  kill(): void
}

/** runs the real `faber` bin on a real pseudo-terminal (util-linux `script`), keys typed through it */
export function faberPty(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Pty {
  const command = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: undefined, TERM: 'xterm', COLUMNS: '160', LINES: '50', ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let output = ''
  const waiters = new Set<() => void>()
  const check = () => {
    for (const waiter of waiters) waiter()
  }
  child.stdout.on('data', (chunk) => {
    output += chunk
    check()
  })
  child.stderr.on('data', (chunk) => {
    output += chunk
    check()
  })
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)))
  const count = (text: string | RegExp) => (typeof text === 'string' ? output.split(text).length - 1 : (output.match(new RegExp(text, 'g')) ?? []).length)
  return {
    get output() {
      return output
    },
    until(text, { times = 1, timeoutMs = 20_000 } = {}) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(waiter)
          reject(new Error(`timed out waiting for ${text} (×${times}) in:\n${output}`))
        }, timeoutMs)
        const waiter = () => {
          if (count(text) < times) return
          clearTimeout(timer)
          waiters.delete(waiter)
          resolve(output)
        }
        waiters.add(waiter)
        exited.then(() =>
          setImmediate(() => {
            waiter()
            if (!waiters.has(waiter)) return
            clearTimeout(timer)
            waiters.delete(waiter)
            reject(new Error(`exited before ${text} (×${times}) appeared:\n${output}`))
          }),
        )
        waiter()
      })
    },
    type(text) {
      child.stdin.write(text)
    },
    exited,
    kill() {
      child.kill('SIGKILL')
    },
  }
}

/** a plugin with a `stamp` tool whose body appends a line to `config.file` (and to `bodies`) each time it runs */
export function stampPlugin(bodies: string[] = []) {
  return {
    name: 'stamp',
    // starting it writes nothing: only the body does
    replay: 'inert',
    apply(ctx: Context, config: { file: string }) {
      ctx.tools.register(
        defineTool({
          name: 'stamp',
          description: 'appends a line to a file',
          parameters: t.object({ text: t.string() }),
          output: { schema: t.object({ stamped: t.string() }) },
          execute: async ({ text }) => {
            bodies.push(text)
            await appendFile(config.file, `${text}\n`)
            return { stamped: text }
          },
        }),
      )
    },
  }
}

/** every file under `root` with its bytes and modification time */
export async function tree(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {}
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const file = join(entry.parentPath, entry.name)
    out[file] = `${(await stat(file)).mtimeMs} ${(await readFile(file)).toString('base64')}`
  }
  return out
}
