// `faber run` end to end: the example deployment file against a local OpenAI-compatible streaming server (a run_code
// program, an approval left unanswered when piped, a final answer), next to `faber --version` as the start-up baseline.
// and what a long program costs the person watching: `faber run` on a scripted deployment whose one run_code program makes
// 3,000 nested calls (every 500th fails), its transcript's bytes and wall time on a real terminal (util-linux `script`),
// on a terminal with --verbose, piped, and piped with --json. the piped run is the baseline.

import { spawn } from 'node:child_process'
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { modelServer } from '../packages/agent/tests/model-servers.ts'
import { isMain } from './harness.ts'

const BIN = fileURLToPath(new URL('../packages/cli/bin/faber.mjs', import.meta.url))
const CALLS = 3000

const PROGRAM = `let failed = 0
for (let i = 0; i < ${CALLS}; i += 100) {
  await Promise.all(Array.from({ length: 100 }, (_, j) => (i + j) % 500 === 499
    ? tools.read({ path: 'missing-' + (i + j) + '.txt' }).catch(() => failed++)
    : tools.list({ path: '.' })))
}
return { calls: ${CALLS}, failed }`

const DEPLOYMENT = `mode: code
plugins:
  '@faber/sandbox': {}
  '@faber/plugin-tools-fs': { root: '\${dir}/ws' }
model:
  provider: scripted
  script:
    - toolCalls: [{ name: run_code, arguments: { code: ${JSON.stringify(PROGRAM)}, description: ${CALLS} nested calls } }]
    - text: done
`

function run(args: string[], tty: boolean, cwd: string): Promise<{ bytes: number; ms: number; code: number | null }> {
  const started = performance.now()
  const command = [process.execPath, BIN, ...args].map((a) => `'${a}'`).join(' ')
  const child = tty
    ? spawn('script', ['-qfec', command, '/dev/null'], { cwd, env: { ...process.env, TERM: 'xterm' }, stdio: ['pipe', 'pipe', 'pipe'] })
    : spawn(process.execPath, [BIN, ...args], { cwd, stdio: ['pipe', 'pipe', 'pipe'] })
  let bytes = 0
  child.stdout.on('data', (chunk: Buffer) => {
    bytes += chunk.length
    // on the terminal the chat waits for a line: give it one, then leave
    if (tty && chunk.includes('you › ')) child.stdin.write(sent++ === 0 ? 'go\r' : '/exit\r')
  })
  child.stderr.on('data', (chunk: Buffer) => (bytes += chunk.length))
  let sent = 0
  if (!tty) child.stdin.end('go\n')
  return new Promise((resolve) => child.on('close', (code) => resolve({ bytes, ms: performance.now() - started, code })))
}

export async function benchTranscript() {
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-transcript-'))
  await mkdir(join(dir, 'ws'))
  await writeFile(join(dir, 'ws', 'a.txt'), 'a\n')
  await writeFile(join(dir, 'faber.yml'), DEPLOYMENT)
  const figures: Record<string, { bytes: number; ms: number }> = {}
  try {
    const cases: [string, string[], boolean][] = [
      ['piped', ['run', 'faber.yml'], false],
      ['piped --json', ['run', 'faber.yml', '--json'], false],
      ['terminal', ['run', 'faber.yml'], true],
      ['terminal --verbose', ['run', 'faber.yml', '--verbose'], true],
    ]
    for (const [label, args, tty] of cases) {
      const { bytes, ms, code } = await run(args, tty, dir)
      if (code !== 0) throw new Error(`${label}: faber exited ${code}`)
      figures[label] = { bytes, ms: Math.round(ms) }
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
  const base = figures.piped
  for (const [label, { bytes, ms }] of Object.entries(figures)) {
    const ratio = `${(bytes / base.bytes).toFixed(2)}× bytes, ${(ms / base.ms).toFixed(2)}× time of piped`
    console.log(`  ${`${CALLS} nested calls, ${label}`.padEnd(40)} ${`${bytes} B`.padStart(10)} ${`${ms} ms`.padStart(9)}   ${ratio}`)
  }
  return figures
}

function piped(args: string[], cwd: string, input: string, env: NodeJS.ProcessEnv = {}): Promise<{ ms: number; code: number | null }> {
  const started = performance.now()
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'ignore'] })
  child.stdin.end(input)
  return new Promise((resolve) => child.on('close', (code) => resolve({ ms: performance.now() - started, code })))
}

export async function benchRunAgainstServer() {
  const example = fileURLToPath(new URL('../examples/deployment/', import.meta.url))
  const dir = await mkdtemp(join(tmpdir(), 'faber-bench-run-'))
  await mkdir(join(dir, 'workspace'))
  await copyFile(join(example, 'faber.yml'), join(dir, 'faber.yml'))
  await copyFile(join(example, 'workspace', 'NOTES.md'), join(dir, 'workspace', 'NOTES.md'))
  const code =
    "const notes = await tools.read({ path: 'NOTES.md' })\nawait tools.write({ path: 'SUMMARY.md', content: 'x' }).catch(() => {})\nreturn notes.totalLines"
  const figures: { startupMs: number[]; runMs: number[] } = { startupMs: [], runMs: [] }
  try {
    for (let round = 0; round < 3; round++) {
      const server = await modelServer('openai', [
        { toolCalls: [{ name: 'run_code', arguments: { code, description: 'read the notes' } }] },
        { text: 'The notes describe the example workspace.' },
      ])
      try {
        figures.startupMs.push((await piped(['--version'], dir, '')).ms)
        const run = await piped(['run', 'faber.yml', '--base-url', server.url], dir, 'summarise the notes\n', { FABER_API_KEY: 'sk-local' })
        if (run.code !== 0 || server.requests.length !== 2) throw new Error(`faber run exited ${run.code} after ${server.requests.length} request(s)`)
        figures.runMs.push(run.ms)
      } finally {
        await server.close()
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
  const best = (values: number[]) => Math.round(Math.min(...values))
  const startup = best(figures.startupMs)
  const run = best(figures.runMs)
  console.log(`  faber --version (start-up baseline)            ${`${startup} ms`.padStart(9)}   1.00×`)
  console.log(`  faber run, example file, local server, 2 steps ${`${run} ms`.padStart(9)}   ${(run / startup).toFixed(2)}× start-up`)
  return { startupMs: startup, runMs: run }
}

if (isMain(import.meta.url)) {
  await benchRunAgainstServer()
  await benchTranscript()
}
