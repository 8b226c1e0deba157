// the fixture deployment served over stdio and driven by the official MCP inspector's CLI mode
// (`mcp-inspector-cli --cli <command> --method ...`), a child process as a person would run it from a shell

import { type ChildProcess, spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { expect } from 'chai'
import { tempDir } from './helpers.ts'

const require = createRequire(import.meta.url)
const manifest = require.resolve('@modelcontextprotocol/inspector-cli/package.json')
const inspectorBin = join(dirname(manifest), require(manifest).bin['mcp-inspector-cli'])
const serveScript = join(import.meta.dirname, 'fixtures/serve.ts')

interface ToolList {
  tools: { name: string; description: string; inputSchema: Record<string, unknown> }[]
}
interface CallResult {
  content: { type: string; text: string }[]
  structuredContent?: unknown
  isError?: boolean
  _meta?: Record<string, unknown>
}

const running = new Set<ChildProcess>()

/** runs the inspector against `serve.ts <mode>` and parses what it prints */
function inspect<T>(mode: string, method: string[]): Promise<T> {
  const args = [inspectorBin, '--cli', '-e', `MEMORY_FILE_PATH=${join(tempDir(), 'memory.jsonl')}`]
  args.push(process.execPath, '--import', 'tsx', serveScript, mode, ...method)
  // cwd: the inspector reads its own package.json as `../package.json` when that exists relative to the cwd, else
  // `../../package.json` relative to itself, which is not there in pnpm's layout; plugins/mcp/package.json stands in
  const child = spawn(process.execPath, args, { cwd: import.meta.dirname, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  running.add(child)
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  return new Promise<T>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (code) => {
      running.delete(child)
      if (code !== 0) return reject(new Error(`the inspector exited with ${code}: ${stderr.trim()}`))
      try {
        resolve(JSON.parse(stdout) as T)
      } catch {
        reject(new Error(`the inspector printed no JSON: ${stdout}\n${stderr}`))
      }
    })
  })
}

const text = (result: CallResult) => result.content.map((part) => part.text).join('\n')

describe('mcp server: through the MCP inspector CLI', function () {
  // each call starts the inspector, the served deployment and server-memory; slow only on a loaded machine
  this.timeout(60000)
  afterEach(() => {
    // the inspector's process group: it, its client and the served deployment
    for (const child of running) {
      try {
        process.kill(-child.pid!, 'SIGKILL')
      } catch {}
    }
    running.clear()
  })

  it('lists only run_code under code mode, described with the code-only rule and the SDK', async () => {
    const { tools } = await inspect<ToolList>('code', ['--method', 'tools/list'])
    expect(tools.map((tool) => tool.name)).to.deep.equal(['run_code'])
    expect(tools[0].inputSchema).to.deep.include({ type: 'object', required: ['code', 'description'] })
    const description = tools[0].description
    expect(description).to.include('## How to call tools here')
    expect(description).to.include('## The tools SDK')
    expect(description).to.match(/\n {2}add\(args: /)
    expect(description).to.include('memory__read_graph(args?: Record<string, unknown>): Promise<')
  })

  it('lists every visible tool under native mode', async () => {
    const { tools } = await inspect<ToolList>('native', ['--method', 'tools/list'])
    const names = tools.map((tool) => tool.name)
    expect(names).to.include.members(['add', 'memory__read_graph', 'read_secret', 'wipe'])
    expect(names).not.to.include('run_code')
  })

  it('runs a run_code program whose nested calls go through the pipeline', async () => {
    const code = 'const { sum } = await tools.add({ a: 20, b: 22 }); console.log("sum " + sum); return sum * 2'
    const result = await inspect<CallResult>('code', ['--method', 'tools/call', '--tool-name', 'run_code', '--tool-arg', `code=${code}`, 'description=adds'])
    expect(result.isError, text(result)).to.equal(false)
    expect(result.structuredContent).to.deep.equal({ logs: ['sum 42'], result: 84 })
    expect(text(result)).to.equal('sum 42\n84')
  })

  it('rejects a direct call to a collapsed tool with the route message', async () => {
    const result = await inspect<CallResult>('code', ['--method', 'tools/call', '--tool-name', 'add', '--tool-arg', 'a=1', 'b=2'])
    expect(result).to.deep.include({ isError: true, _meta: { 'faber/error': { code: 'UNKNOWN_TOOL' } } })
    expect(text(result)).to.equal(
      'Error: unknown tool "add": under code mode only run_code can be called directly; call tools.add(...) inside a run_code program',
    )
  })
})
