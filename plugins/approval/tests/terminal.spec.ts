import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

const child = fileURLToPath(new URL('./pty-child.ts', import.meta.url))

// util-linux `script` gives the child a real pseudo-terminal; no native pty module needed
function underPty(answer: string, options: { raw?: boolean } = {}) {
  const command = `${JSON.stringify(process.execPath)} --import tsx ${JSON.stringify(child)}`
  const env = { ...process.env, RAW_MODE: options.raw ? '1' : '' }
  const proc = spawn('script', ['-qfec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'], env })
  let output = ''
  return new Promise<string>((resolve, reject) => {
    proc.stdout.on('data', (chunk) => {
      const before = output
      output += chunk.toString()
      if (!before.includes('reject: ') && output.includes('reject: ')) proc.stdin.write(options.raw ? answer : `${answer}\n`)
    })
    proc.on('error', reject)
    proc.on('close', (code) => (code === 0 ? resolve(output) : reject(new Error(`exit ${code}: ${output}`))))
  })
}

describe('approval: the terminal answerer on a real pseudo-terminal', function () {
  this.timeout(20000)

  it('prompts on the TTY and takes the answer typed there', async () => {
    const allowed = await underPty('y')
    expect(allowed).to.contain('wants to call write')
    expect(allowed).to.contain('"path": "notes.md"')
    expect(allowed).to.contain('→ allowed once')
    expect(allowed).to.contain('RESULT wrote notes.md')
  })

  it('a rejection typed there denies the call', async () => {
    const rejected = await underPty('n')
    expect(rejected).to.contain('→ rejected')
    expect(rejected).to.contain('RESULT Error: the call to "write" was rejected by the approver')
  })

  it('a terminal in raw mode: Enter is \\r, and what is typed is echoed', async () => {
    const allowed = await underPty('y\r', { raw: true })
    expect(allowed).to.contain('reject: y')
    expect(allowed).to.contain('→ allowed once')
    expect(allowed).to.contain('RESULT wrote notes.md')
  })

  it('a terminal in raw mode: Ctrl-C abandons the question and the call is not run', async () => {
    const abandoned = await underPty('\x03', { raw: true })
    expect(abandoned).to.contain('(Ctrl-C: not answered)')
    expect(abandoned).not.to.contain('RESULT wrote')
    expect(abandoned).to.match(/RESULT Error: .*approv/)
  })
})
