// the live web view in a real headless Chromium (Debian's chromium package, driven by playwright-core): the page
// loads, renders the plugin tree and an agent's tools, shows a call made here with its nested calls and a denial's
// reason, and an approval answered on the page reaches the waiting call; a question another process left in the
// deployment's store is listed and answered there. screenshots go to artifacts/web/.

import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { defineTool, t } from '@faber/core'
import * as kit from '@faber/core/testing'
import Approval, { type ApprovalDecided, GrantStore, PendingQuestions, WebAnswerer } from '@faber/plugin-approval'
import WorkerSandbox from '@faber/sandbox'
import DeploymentStore, { openStore } from '@faber/store'
import { expect } from 'chai'
import type { Context } from 'cordis'
import type { Browser, Page } from 'playwright-core'
import Inspector, { MASK } from '../src/index.ts'
import { call, openPage, team } from './helpers.ts'

const ARTIFACTS = resolve(import.meta.dirname, '../../../artifacts/web')
// CI machines are slow and shared: wait for the DOM, with room to spare
const WAIT = 30_000

function tools(ctx: Context) {
  ctx.tools.register(
    defineTool({
      name: 'read',
      description: 'reads a file (pretend)',
      parameters: t.object({ path: t.string() }),
      output: { schema: t.string() },
      execute: ({ path }) => `contents of ${path}`,
      isConcurrencySafe: () => true,
      annotations: { readOnly: true },
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'rm',
      description: 'removes a file (pretend)',
      parameters: t.object({ path: t.string() }),
      output: { schema: t.string() },
      execute: ({ path }) => `removed ${path}`,
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'deploy',
      description: 'deploys (pretend)',
      parameters: t.object({ target: t.string() }),
      output: { schema: t.string() },
      execute: ({ target }) => `deployed to ${target}`,
    }),
  )
}

async function deployment(store: string) {
  // 'licensed' fails to start below, for the view to show it; declared non-essential, so tools still run
  const ctx = await kit.deployment({ mode: 'native', nonEssential: ['licensed'] }, (ctx) => {
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    ctx.plugin(DeploymentStore, { path: store })
    ctx.plugin(Approval, { require: ['deploy'], rules: [] })
    ctx.plugin(WebAnswerer)
    ctx.plugin({
      name: 'safety',
      inject: ['tools'],
      apply: (c: Context) => {
        c.on('tools/pre-execute', (exec) => (exec.name === 'rm' ? { kind: 'deny', reason: 'rm is never allowed here' } : undefined))
      },
    })
    ctx.plugin(team)
    ctx.plugin(Inspector, { web: { listen: '127.0.0.1:0' } })
    ctx.plugin({ name: 'vault', apply: () => {} }, { apiKey: 'sk-very-secret', region: 'eu' })
  })
  tools(ctx)
  // loaded after the start check, which would rethrow its failure
  ctx.plugin({
    name: 'licensed',
    apply: () => {
      throw new Error('no licence key')
    },
  })
  await ctx.lifecycle.flush()
  return ctx
}

function httpStatus(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<number> {
  return new Promise((done, fail) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers }, (res) => {
      res.resume()
      done(res.statusCode ?? 0)
    })
    req.on('error', fail)
    req.end(options.body)
  })
}

describe('the live web view in Chromium', function () {
  this.timeout(120_000)
  let ctx: Context
  let browser: Browser
  let page: Page
  let url: string
  const dir = mkdtempSync(join(tmpdir(), 'faber-web-'))
  const store = join(dir, 'faber.db')

  before(async () => {
    mkdirSync(ARTIFACTS, { recursive: true })
    ctx = await deployment(store)
    url = ctx.inspector.web!.url
    ;({ browser, page } = await openPage(url, WAIT))
  })

  after(async () => {
    await browser?.close()
    await ctx?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  it('answers the icon a browser asks for with every page load: 204, not a 404', async () => {
    expect(await httpStatus(new URL('/favicon.ico', url).href)).to.equal(204)
  })

  it('renders the plugin tree with states and masked configs', async () => {
    await page.waitForSelector('#plugins li[data-plugin="inspector"][data-state="active"]', { timeout: WAIT })
    expect(await page.locator('#plugins li[data-plugin="approval"]').first().getAttribute('data-state')).to.equal('active')
    const vault = page.locator('#plugins li[data-plugin="vault"]')
    const config = await vault.locator('details.config pre').textContent()
    expect(config).to.contain(MASK).and.contain('eu').and.not.contain('sk-very-secret')
    const licensed = page.locator('#plugins li[data-plugin="licensed"][data-state="failed"]')
    expect(await licensed.locator('.error').textContent()).to.equal('start error: no licence key')
    expect(await page.locator('#inactive').textContent()).to.contain('NOT ACTIVE: licensed')
  })

  it("renders an agent's mode, visible tools and wire", async () => {
    const coder = page.locator('#agents details[data-layer="coder"]')
    await coder.waitFor({ timeout: WAIT })
    expect(await coder.locator('summary').first().textContent()).to.contain('mode code')
    const visible = await coder.locator('ul.visible li').evaluateAll((items) => items.map((li) => li.getAttribute('data-tool')))
    expect(visible).to.include.members(['read', 'rm', 'deploy', 'run_code', 'cordis_inspect'])
    expect(await coder.locator('details.wire summary .chip').allTextContents()).to.deep.equal(['run_code'])
    expect(await coder.locator('details.sdk pre').textContent()).to.contain('declare const tools')
  })

  it('streams a run_code call with its nested calls, a denial and the source lines', async () => {
    // the same call on two lines, with an argument the text does not show: only the sandbox knows which line made which
    const program = [
      "const file = { path: 'a.txt' }",
      'const text = await tools.read(file)',
      "const more = await tools.read({ path: 'b.txt' })",
      'let refused = ""',
      'try {',
      '  await tools.rm(file)',
      '} catch (error) {',
      '  refused = error.message',
      '}',
      'const again = await tools.read(file)',
      'return { text, more, refused, again }',
    ].join('\n')
    const result = await call(ctx, 'run-1', 'run_code', { code: program, description: 'read, then try to remove' })
    expect(result.isError).to.equal(false)
    const run = page.locator('#calls > details.call[data-call="coder/run-1"].ok')
    await run.waitFor({ timeout: WAIT })
    const denied = run.locator('details.call[data-call="coder/run-1/3"].error')
    await denied.waitFor({ state: 'attached', timeout: WAIT })
    expect(await run.locator('details.call[data-call^="coder/run-1/"].ok').count()).to.equal(3)
    await run.locator(':scope > summary').click()
    await denied.locator(':scope > summary').click()
    const stages = await denied.locator('table.stages').textContent()
    expect(stages).to.contain('deny').and.contain('safety').and.contain('rm is never allowed here')
    expect(await denied.locator(':scope > summary .site').textContent()).to.equal('line 6, column 15')
    expect(ctx.inspector.select('calls', 'run-1').text).to.contain('↳ in run-1 at line 6, column 15: rm [run-1/3] DENIED')
    // the lines that made the nested calls are highlighted in the program's source, each marked with its call
    const hits = await run
      .locator(':scope > .body ol.source li.hit')
      .evaluateAll((items) => items.map((li) => [li.getAttribute('data-line'), li.querySelector('.marks')?.textContent]))
    expect(hits).to.deep.equal([
      ['2', '#1'],
      ['3', '#2'],
      ['6', '#3'],
      ['10', '#4'],
    ])
    await page.screenshot({ path: resolve(ARTIFACTS, 'calls.png'), fullPage: true })
  })

  it('answers an approval from the page, and the waiting call gets it', async () => {
    const decided: ApprovalDecided[] = []
    ctx.on('approval/decided', (event) => {
      decided.push(event)
    })
    const program = "return await tools.deploy({ target: 'staging' })"
    const pending = call(ctx, 'run-2', 'run_code', { code: program, description: 'deploy to staging' })
    const approval = page.locator('#approvals .approval').filter({ hasText: 'deploy' })
    const allow = approval.locator('button[data-answer="allow"]')
    await allow.waitFor({ timeout: WAIT })
    await page.waitForSelector('#calls > details.call[data-call="coder/run-2"].waiting', { timeout: WAIT })
    await page.waitForSelector('details.call[data-call="coder/run-2/1"].waiting', { state: 'attached', timeout: WAIT })
    // the README's picture: a program's nested calls and their denial, and an approval waiting to be answered
    await page.screenshot({ path: resolve(ARTIFACTS, 'web-view.png') })
    await page.screenshot({ path: resolve(ARTIFACTS, 'approval.png'), fullPage: true })
    await allow.focus()
    await page.keyboard.press('Enter')
    const result = await pending
    if (result.isError) throw new Error(result.content)
    expect((result.value as { result: string }).result).to.equal('deployed to staging')
    expect(decided.map((d) => [d.tool, d.outcome, d.answeredBy])).to.deep.equal([['deploy', 'allowed', 'approval-web']])
    expect(decided[0].note).to.match(/^answered on the web view from/)
    await page.waitForSelector('#calls > details.call[data-call="coder/run-2"].ok', { timeout: WAIT })
    await page.waitForSelector('#approval-count.zero', { timeout: WAIT })
    await page.screenshot({ path: resolve(ARTIFACTS, 'inspector.png'), fullPage: false })
  })

  it('lists a question another process left in the store, and answers it there', async () => {
    // another writer of the store, as a faber run asking at a terminal nobody watches is
    const other = await openStore({ path: store })
    try {
      const questions = new PendingQuestions(other, () => new GrantStore(other).ready())
      const expiresAt = new Date(Date.now() + 60_000).toISOString()
      const id = await questions.ask({
        session: 's',
        rootCallId: 'run-9',
        callId: 'run-9/1',
        tool: 'deploy',
        arguments: { target: 'prod' },
        reason: 'asked',
        expiresAt,
      })
      const question = page.locator(`#questions [data-question="${id}"]`)
      await question.waitFor({ timeout: WAIT })
      expect(await question.textContent())
        .to.contain('deploy')
        .and.contain('asked by another process')
        .and.contain('"target": "prod"')
      const elsewhere = new URL(`/api/questions/${id}`, url).href
      expect(
        await httpStatus(elsewhere, {
          method: 'POST',
          headers: { 'content-type': 'application/json', origin: 'http://evil.example' },
          body: '{"decision":"allow"}',
        }),
      ).to.equal(403)
      await question.locator('button[data-answer="allow"]').click()
      await question.waitFor({ state: 'detached', timeout: WAIT })
      expect(await questions.get(id)).to.deep.include({ decision: 'allow' })
      expect((await questions.get(id))?.answeredBy).to.match(/^the web view from /)
      expect(await page.locator('#questions-panel').isHidden()).to.equal(true)
    } finally {
      await other.close()
    }
  })

  it('shows a replay report above the calls when it serves one', async () => {
    const replay = {
      deployment: 'stricter.yml',
      summary: { replayed: 3, unchanged: 2, changed: 1, newlyDenied: 1, newlyAllowed: 0, newlyAsked: 0, unknown: 0 },
      changes: [
        {
          session: 's1',
          turn: 1,
          agent: 'main',
          callId: 'call_2/4',
          name: 'edit',
          arguments: '{"path":"TODO.md"}',
          within: { callId: 'call_2', line: 12, source: 'await tools.edit(tick)' },
          old: { verdict: 'allow' },
          new: { verdict: 'deny', stage: 'pre-execute', plugin: 'guards', reason: 'the lead keeps the TODO list' },
        },
      ],
      morePermissive: false,
    }
    const view = await ctx.inspector.serve({ replay })
    const other = await openPage(view.url, WAIT)
    try {
      const text = await other.page.locator('#replay-panel').textContent({ timeout: WAIT })
      expect(text).to.contain('2 unchanged, 1 newly denied').and.contain('Nothing became more permissive')
      expect(text).to.contain('edit').and.contain('the lead keeps the TODO list').and.contain('line 12: await tools.edit(tick)')
      // without a replay report the section stays hidden, and /api/replay says why
      expect(await page.locator('#replay-panel').isHidden()).to.equal(true)
      const res = await fetch(new URL('api/replay', url))
      expect(res.status).to.equal(404)
    } finally {
      await other.browser.close()
      await view.close()
    }
  })

  it('filters the calls from the keyboard', async () => {
    await page.locator('#calls-panel').focus()
    await page.keyboard.press('/')
    expect(await page.evaluate('document.activeElement.id')).to.equal('filter')
    await page.keyboard.type('read, then')
    await page.waitForSelector('#calls > details.call[data-call="coder/run-2"].hidden', { state: 'attached', timeout: WAIT })
    expect(await page.locator('#calls > details.call[data-call="coder/run-1"]').getAttribute('class')).to.not.contain('hidden')
    await page.keyboard.press('Escape')
    await page.waitForSelector('#calls > details.call.hidden', { state: 'detached', timeout: WAIT })
  })

  it('follows changes of the tool set', async () => {
    const added = ctx.tools.register(
      defineTool({
        name: 'lint',
        description: 'lints (pretend)',
        parameters: t.object({}),
        output: { schema: t.string() },
        execute: () => 'clean',
      }),
    )
    await page.waitForSelector('#agents details[data-layer="coder"] li[data-tool="lint"]', { timeout: WAIT })
    added()
    await page.waitForSelector('#agents details[data-layer="coder"] li[data-tool="lint"]', { state: 'detached', timeout: WAIT })
  })

  it('refuses a foreign Host, cross-origin answers and answers without JSON', async () => {
    const { port } = ctx.inspector.web!
    const api = `http://127.0.0.1:${port}/api/approvals/approval-1`
    expect(await httpStatus(`http://127.0.0.1:${port}/api/report`, { headers: { host: `evil.example:${port}` } })).to.equal(403)
    expect(await httpStatus(`http://127.0.0.1:${port}/api/report`)).to.equal(200)
    const json = { 'content-type': 'application/json' }
    const body = JSON.stringify({ decision: 'allow' })
    expect(await httpStatus(api, { method: 'POST', headers: json, body })).to.equal(403)
    expect(await httpStatus(api, { method: 'POST', headers: { ...json, origin: 'http://evil.example' }, body })).to.equal(403)
    const origin = `http://127.0.0.1:${port}`
    expect(await httpStatus(api, { method: 'POST', headers: { 'content-type': 'text/plain', origin }, body })).to.equal(415)
    expect(await httpStatus(api, { method: 'POST', headers: { ...json, origin }, body })).to.equal(404)
  })

  it('bound beyond loopback, it makes up a token and requires it', async () => {
    const view = await ctx.inspector.serve({ host: '0.0.0.0', port: 0 })
    try {
      expect(view.token).to.match(/^[\w-]{32}$/)
      expect(view.url).to.contain(`?token=${view.token}`)
      const base = `http://127.0.0.1:${view.port}`
      expect(await httpStatus(`${base}/api/report`)).to.equal(401)
      // bound to every address, any Host name is accepted: the token guards it
      expect(await httpStatus(`${base}/api/report?token=${view.token}`, { headers: { host: `box.lan:${view.port}` } })).to.equal(200)
    } finally {
      await view.close()
    }
  })

  it('checks web.listen and web.token in its config', () => {
    expect(() => Inspector.Config({ web: { listen: 'not a port' } })).to.throw()
    expect(() => Inspector.Config({ web: { listen: '7070', token: 'short' } })).to.throw()
    expect(Inspector.Config({ web: { listen: 7070 } }).web?.listen).to.equal(7070)
  })

  it('requires its token when it has one', async () => {
    const view = await ctx.inspector.serve({ token: 'a-token-of-enough-length' })
    try {
      expect(view.url).to.match(/\?token=a-token-of-enough-length$/)
      const base = `http://127.0.0.1:${view.port}`
      expect(await httpStatus(`${base}/api/report`)).to.equal(401)
      expect(await httpStatus(`${base}/api/report?token=wrong-token-of-enough-length`)).to.equal(401)
      expect(await httpStatus(`${base}/api/report?token=a-token-of-enough-length`)).to.equal(200)
      const second = await browser.newPage()
      await second.goto(view.url)
      await second.waitForSelector('#status.ok', { timeout: WAIT })
      await second.close()
    } finally {
      await view.close()
    }
  })
})
