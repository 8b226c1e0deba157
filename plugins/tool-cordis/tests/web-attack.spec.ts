// the live web view as an attacker would try it: everything it shows comes from a model or from plugins, so
// markup in a program, an argument, a tool description, a denial's reason, a config or a start error must render
// as text (in a real headless Chromium); requests from other origins and other Host names are refused; a page that
// stops reading the stream costs bounded memory; a program of thousands of calls is shown cut; the view closes
// with the deployment; a port in use is one clear error.

import { request } from 'node:http'
import { connect, createServer, type Socket } from 'node:net'
import { defineTool, t } from '@faber/core'
import * as kit from '@faber/core/testing'
import Approval, { WebAnswerer } from '@faber/plugin-approval'
import WorkerSandbox from '@faber/sandbox'
import { expect } from 'chai'
import { type Context, type ForkScope, Logger } from 'cordis'
import type { Browser, Page } from 'playwright-core'
import Inspector from '../src/index.ts'
import { call, openPage, team } from './helpers.ts'

Logger.levels.base = 0

const WAIT = 60_000

// each sets window.pwned if it ever runs as markup or script
const PAYLOADS = {
  config: '<img src=x onerror="window.pwned=\'config\'">',
  link: 'javascript:window.pwned="link"',
  description: '<script>window.pwned="description"</script><img src=x onerror="window.pwned=\'description\'">',
  reason: '</textarea></pre><svg onload="window.pwned=\'reason\'"></svg>',
  argument: '"><img src=x onerror="window.pwned=\'argument\'">',
  startError: '<iframe src="javascript:parent.pwned=\'error\'"></iframe>',
  program: '</pre></ol><script>window.pwned="program"</script>',
}

async function deployment() {
  // 'broken' fails to start below, for its error to reach the page; declared non-essential, so tools still run
  const ctx = await kit.deployment({ mode: 'native', codeLimits: { wallMs: 150_000 }, nonEssential: ['broken'] }, (ctx) => {
    // a slow CI machine may need long for a program of 5 000 calls
    ctx.plugin(WorkerSandbox, { poolSize: 1 })
    ctx.plugin(Approval, { require: ['deploy'], rules: [] })
    ctx.plugin(WebAnswerer)
    ctx.plugin({
      name: 'evil-policy',
      inject: ['tools'],
      apply: (c: Context) => {
        c.on('tools/pre-execute', (exec) => {
          if (exec.name !== 'rm') return
          const huge = (exec.arguments as { path?: string }).path === 'huge'
          return { kind: 'deny', reason: huge ? 'r'.repeat(100_000) : PAYLOADS.reason }
        })
      },
    })
    ctx.plugin(team)
    ctx.plugin(Inspector, { web: { listen: '127.0.0.1:0' } })
    ctx.plugin({ name: 'notes', apply: () => {} }, { note: PAYLOADS.config, homepage: PAYLOADS.link })
  })
  for (const name of ['read', 'rm', 'deploy', 'noop'])
    ctx.tools.register(
      defineTool({
        name,
        description: name === 'read' ? PAYLOADS.description : `${name} (pretend)`,
        parameters: t.object({ path: t.string() }),
        output: { schema: t.string() },
        execute: ({ path }) => `${name} ${path.length}`,
        isConcurrencySafe: () => true,
      }),
    )
  ctx.plugin({
    name: 'broken',
    apply: () => {
      throw new Error(PAYLOADS.startError)
    },
  })
  await ctx.lifecycle.flush()
  return ctx
}

interface Reply {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

function http(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Reply> {
  return new Promise((done, fail) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      // a stream is cut after its first event
      res.on('data', (chunk: string) => {
        body += chunk
        if (res.headers['content-type']?.startsWith('text/event-stream') && body.includes('\n\n')) res.destroy()
      })
      res.on('close', () => done({ status: res.statusCode ?? 0, headers: res.headers, body }))
    })
    req.on('error', fail)
    req.end(options.body)
  })
}

/** a page that asks for the stream and then reads nothing until told to */
function stalledReader(port: number, path: string) {
  const socket: Socket = connect(port, '127.0.0.1')
  socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
  socket.pause()
  return {
    /** reads from now on until `done` holds of what was read */
    readUntil(done: (text: string) => boolean): Promise<string> {
      return new Promise((resolve, reject) => {
        let text = ''
        socket.setEncoding('utf8')
        socket.on('data', (chunk: string) => {
          text += chunk
          if (done(text)) {
            socket.destroy()
            resolve(text)
          }
        })
        socket.on('close', () => reject(new Error(`the stream closed after ${text.length} characters`)))
        socket.resume()
      })
    },
  }
}

describe('the live web view under attack', function () {
  this.timeout(180_000)
  let ctx: Context
  let browser: Browser
  let page: Page
  let base: string
  let port: number

  before(async () => {
    ctx = await deployment()
    port = ctx.inspector.web!.port
    base = `http://127.0.0.1:${port}`
    ;({ browser, page } = await openPage(ctx.inspector.web!.url, WAIT))
  })

  after(async () => {
    await browser?.close()
    await ctx?.stop()
  })

  it('renders markup from configs, descriptions, reasons, arguments, programs and start errors as text', async () => {
    const program = [
      `// ${PAYLOADS.program}`,
      `await tools.read({ path: ${JSON.stringify(PAYLOADS.argument)} })`,
      "try { await tools.rm({ path: 'x' }) } catch {}",
      'return 1',
    ].join('\n')
    const result = await call(ctx, 'xss-1', 'run_code', { code: program, description: PAYLOADS.description })
    if (result.isError) throw new Error(result.content)
    const run = page.locator('#calls > details.call[data-call="coder/xss-1"].ok')
    await run.waitFor({ timeout: WAIT })
    await page.locator('details.call[data-call="coder/xss-1/2"].error').waitFor({ state: 'attached', timeout: WAIT })
    await page.locator('#plugins li[data-plugin="broken"][data-state="failed"]').waitFor({ timeout: WAIT })
    // open everything, so that nothing is left unrendered
    await page.evaluate('document.querySelectorAll("details").forEach((d) => { d.open = true })')
    expect(await page.evaluate('window.pwned')).to.equal(undefined)
    // not one element made of the deployment's text
    const made = await page.evaluate('document.querySelectorAll("main img, main svg, main script, main iframe, main textarea, main a[href]").length')
    expect(made).to.equal(0)
    const text = (await page.locator('main').textContent()) ?? ''
    for (const [what, payload] of Object.entries(PAYLOADS)) {
      // arguments and configs are shown as JSON (their quotes escaped)
      const shown = ['argument', 'config', 'link'].includes(what) ? JSON.stringify(payload).slice(1, -1) : payload
      expect(text, what).to.contain(shown)
    }
  })

  it('serves everything with a strict Content-Security-Policy, nosniff and no framing', async () => {
    for (const path of ['/', '/app.js', '/style.css', '/api/report', '/api/nothing']) {
      const reply = await http(`${base}${path}`)
      const csp = String(reply.headers['content-security-policy'])
      expect(csp, path).to.contain("default-src 'none'").and.contain("script-src 'self'").and.contain("frame-ancestors 'none'")
      expect(csp, path).to.not.contain('unsafe-inline').and.not.contain('unsafe-eval')
      expect(reply.headers['x-content-type-options'], path).to.equal('nosniff')
      expect(reply.headers['x-frame-options'], path).to.equal('DENY')
      expect(reply.headers['referrer-policy'], path).to.equal('no-referrer')
    }
    // the page has no inline script or handler for the policy to have to allow
    const html = (await http(`${base}/`)).body
    expect(html)
      .to.not.match(/<script(?![^>]*\bsrc=)/)
      .and.not.match(/\son[a-z]+=/i)
  })

  it('refuses foreign Host names on every endpoint, the stream included', async () => {
    for (const path of ['/', '/api/report', '/api/events']) {
      const reply = await http(`${base}${path}`, { headers: { host: `rebound.example:${port}` } })
      expect(reply.status, path).to.equal(403)
      expect(reply.body, path).to.not.contain('event:')
    }
    expect((await http(`${base}/api/events`, { headers: { host: `localhost:${port}` } })).body).to.match(/^event: snapshot\n/)
  })

  it('refuses answers a cross-origin page can send: a form, a fetch, a token in the URL', async () => {
    const waiting = call(ctx, 'csrf-1', 'deploy', { path: 'prod' }, null)
    const id = await page.locator('#approvals .approval[data-approval]').first().getAttribute('data-approval', { timeout: WAIT })
    const url = `${base}/api/approvals/${id}`
    const body = JSON.stringify({ decision: 'allow' })
    const tries: Record<string, string>[] = [
      // a form posted from another site: a simple content type, its own origin
      { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://evil.example' },
      { 'content-type': 'text/plain', origin: 'http://evil.example' },
      // a fetch from another site (it cannot name this origin)
      { 'content-type': 'application/json', origin: 'http://evil.example' },
      { 'content-type': 'application/json', origin: 'null' },
      { 'content-type': 'application/json' },
      // a rebinding page: its origin is the name it rebinds, which is not a name the view accepts
      { 'content-type': 'application/json', origin: `http://rebound.example:${port}`, host: `rebound.example:${port}` },
    ]
    for (const headers of tries) expect((await http(url, { method: 'POST', headers, body })).status, JSON.stringify(headers)).to.be.oneOf([403, 415])
    // the browser's own page from another site cannot either (the request leaves, the view refuses it)
    const other = await browser.newPage()
    try {
      await other.goto('about:blank')
      const status = await other.evaluate(
        `fetch(${JSON.stringify(url)}, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: ${JSON.stringify(body)} }).then(() => 'sent', () => 'failed')`,
      )
      expect(status).to.be.oneOf(['sent', 'failed'])
    } finally {
      await other.close()
    }
    expect(await page.locator(`#approvals .approval[data-approval="${id}"]`).count()).to.equal(1)
    await page.locator(`#approvals .approval[data-approval="${id}"] button[data-answer="reject"]`).click()
    const result = await waiting
    expect(result.isError).to.equal(true)
    // the answered approval leaves the page (the next test reads the first one waiting there)
    await page.locator(`#approvals .approval[data-approval="${id}"]`).waitFor({ state: 'detached', timeout: WAIT })
  })

  it('with a token, takes an answer only with the token in its header, never from the URL', async () => {
    const view = await ctx.inspector.serve({ token: 'a-token-of-enough-length' })
    try {
      const waiting = call(ctx, 'csrf-2', 'deploy', { path: 'prod' }, null)
      const id = await page.locator('#approvals .approval[data-approval]').first().getAttribute('data-approval', { timeout: WAIT })
      const at = `http://127.0.0.1:${view.port}`
      const json = { 'content-type': 'application/json', origin: at }
      const body = JSON.stringify({ decision: 'allow' })
      const inUrl = await http(`${at}/api/approvals/${id}?token=a-token-of-enough-length`, { method: 'POST', headers: json, body })
      expect(inUrl.status).to.equal(401)
      const wrong = await http(`${at}/api/approvals/${id}`, { method: 'POST', headers: { ...json, 'x-faber-token': 'b-token-of-enough-length' }, body })
      expect(wrong.status).to.equal(401)
      const right = await http(`${at}/api/approvals/${id}`, { method: 'POST', headers: { ...json, 'x-faber-token': 'a-token-of-enough-length' }, body })
      expect(right.status).to.equal(200)
      expect((await waiting).isError).to.equal(false)
    } finally {
      await view.close()
    }
  })

  it('a page that stops reading misses events and is told so, rather than having them kept without bound', async () => {
    const view = await ctx.inspector.serve({ backlogBytes: 64 * 1024 })
    try {
      const reader = stalledReader(view.port, '/api/events')
      // programs near the size the view keeps: far more than the sockets' buffers hold
      const padding = `// ${'x'.repeat(190_000)}`
      for (let i = 0; i < 60; i++) {
        const result = await call(ctx, `big-${i}`, 'run_code', { code: `${padding}\nreturn ${i}`, description: 'big' })
        if (result.isError) throw new Error(result.content)
      }
      // (read raw, in HTTP's chunked framing: each event is one chunk)
      const text = await reader.readUntil((read) => /event: lagged\ndata: [^\n]*\n\n\r\n[\da-f]+\r\nevent: snapshot\n/.test(read))
      const lagged = JSON.parse(/event: lagged\ndata: (.*)\n/.exec(text)![1]) as { skipped: number; note: string }
      expect(lagged.skipped).to.be.greaterThan(0)
      expect(lagged.note).to.contain('skipped')
      // fewer programs reached it than were run: the rest waited nowhere
      expect(text.split('event: start\n').length - 1).to.be.lessThan(60)
    } finally {
      await view.close()
    }
  })

  it('shows a program of 5 000 calls cut to its first 500, and a thousand calls at once, and keeps none running', async () => {
    const program = 'for (let i = 0; i < 5000; i++) await tools.noop({ path: String(i) })\nreturn 5000'
    const result = await call(ctx, 'many-1', 'run_code', { code: program, description: 'many' })
    if (result.isError) throw new Error(result.content)
    const run = page.locator('#calls > details.call[data-call="coder/many-1"].ok')
    await run.waitFor({ timeout: WAIT })
    await run.locator(':scope > .body > p.dropped').waitFor({ state: 'attached', timeout: WAIT })
    expect(await run.locator(':scope > .body > p.dropped').textContent()).to.equal('4500 more nested calls are not shown: the page keeps the first 500')
    expect(await run.locator(':scope > .body > .children > details.call').count()).to.equal(500)
    const results = await Promise.all(Array.from({ length: 1000 }, (_, i) => call(ctx, `burst-${i}`, 'noop', { path: 'y'.repeat(10_000) }, null)))
    expect(results.every((r) => !r.isError)).to.equal(true)
    await page.locator('#calls > details.call[data-call="/burst-999"].ok').waitFor({ state: 'attached', timeout: WAIT })
    // arguments are previews
    const args = (await page.locator('#calls > details.call[data-call="/burst-999"] pre.args').textContent()) ?? ''
    expect(args.length).to.be.lessThan(2100)
    // the page keeps its last 300 top-level calls
    expect(await page.locator('#calls > details.call').count()).to.equal(300)
    const snapshot = JSON.parse(/^event: snapshot\ndata: (.*)$/m.exec((await http(`${base}/api/events`)).body)![1]) as { running: unknown[] }
    expect(snapshot.running).to.deep.equal([])
  })

  it('cuts a huge program and a huge denial reason for display', async () => {
    const view = await ctx.inspector.serve()
    try {
      const huge = `// ${'z'.repeat(300_000)}\nreturn 1`
      await call(ctx, 'huge-1', 'run_code', { code: huge, description: 'huge' })
      await call(ctx, 'huge-2', 'rm', { path: 'huge' }, null)
      const snapshot = JSON.parse(/^event: snapshot\ndata: (.*)$/m.exec((await http(`http://127.0.0.1:${view.port}/api/events`)).body)![1]) as {
        programs: { callId: string; code: string }[]
        calls: { callId: string; stages: { reason?: string }[] }[]
      }
      const denied = snapshot.calls.find((c) => c.callId === 'huge-2')!
      expect(denied.stages.map((stage) => stage.reason?.length ?? 0).sort((a, b) => b - a)[0]).to.equal(2000)
      const kept = snapshot.programs.find((p) => p.callId === 'huge-1')!
      expect(kept.code.length).to.be.lessThan(201_000)
      expect(kept.code).to.match(/\(cut: \d+ more characters\)$/)
    } finally {
      await view.close()
    }
  })

  it('names a port in use in one sentence, with its code', async () => {
    const taken = createServer()
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
    const busy = (taken.address() as { port: number }).port
    try {
      const error = await ctx.inspector.serve({ port: busy }).then(
        () => undefined,
        (e: NodeJS.ErrnoException) => e,
      )
      expect(error?.code).to.equal('EADDRINUSE')
      expect(error?.message).to.equal(`the web view cannot listen: 127.0.0.1:${busy} is already in use: pick another port, or 0 for a free one`)
    } finally {
      taken.close()
    }
  })

  it('closes when the inspector is disposed, without stopping the deployment', async () => {
    let fork!: ForkScope
    const local = await kit.deployment({ mode: 'native' }, (ctx) => (fork = ctx.plugin(Inspector, { web: { listen: '127.0.0.1:0' } })))
    try {
      const view = local.inspector.web!
      const at = view.port
      expect((await http(`http://127.0.0.1:${at}/api/report`)).status).to.equal(200)
      fork.dispose()
      await view.closed
      const refused = await http(`http://127.0.0.1:${at}/`).then(
        () => 'answered',
        (error: NodeJS.ErrnoException) => error.code,
      )
      expect(refused).to.equal('ECONNREFUSED')
      expect(local.get('tools')).to.not.equal(undefined)
    } finally {
      await local.stop()
    }
  })

  it('closes with the deployment, its open streams included', async () => {
    const local = await deployment()
    const at = local.inspector.web!
    const stream = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
      request(`http://127.0.0.1:${at.port}/api/events`, resolve).on('error', reject).end()
    })
    const ended = new Promise((resolve) => stream.on('close', resolve))
    stream.resume()
    await local.stop()
    await ended
    await at.closed
    const refused = await http(`http://127.0.0.1:${at.port}/`).then(
      () => 'answered',
      (error: NodeJS.ErrnoException) => error.code,
    )
    expect(refused).to.equal('ECONNREFUSED')
  })
})

describe('the live web view, when a plugin throws what cannot be turned into text', function () {
  this.timeout(60_000)

  it('answers the request with a message saying so, and the host lives', async () => {
    // a Proxy whose every check of what it is throws a value with no prototype, whose String() throws in turn
    const unshowable = new Proxy(
      {},
      {
        getPrototypeOf() {
          throw Object.create(null)
        },
      },
    )
    // a web answerer of another plugin's making (the view takes whatever provides approvalWeb) that refuses an answer so
    const answerer = {
      config: { remember: [] },
      pending: () => [],
      watch: () => () => {},
      answer: () => {
        throw unshowable
      },
    }
    const local = await kit.deployment({ mode: 'native' }, (ctx) => {
      ctx.plugin({ name: 'odd-answerer', apply: (c: Context) => c.set('approvalWeb', answerer as never) })
      ctx.plugin(Inspector, { web: { listen: '127.0.0.1:0' } })
    })
    try {
      const at = `http://127.0.0.1:${local.inspector.web!.port}`
      const headers = { 'content-type': 'application/json', origin: at }
      const refused = await http(`${at}/api/approvals/a1`, { method: 'POST', headers, body: JSON.stringify({ decision: 'allow' }) })
      expect(refused.status).to.equal(400)
      expect(JSON.parse(refused.body)).to.deep.equal({ error: 'an error that could not be shown' })
      expect((await http(`${at}/api/report`)).status).to.equal(200)
    } finally {
      await local.stop()
    }
  })
})
