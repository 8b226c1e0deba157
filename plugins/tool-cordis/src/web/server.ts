// the web view's HTTP server: the page's static assets (shipped in ../../web, no build step), the report as JSON,
// the live stream as server-sent events, and answers to waiting approvals (this process's, and the questions other
// processes sharing the store left waiting). bound to 127.0.0.1 unless told
// otherwise; bound anywhere else it requires a random token in the URL. every request must name an expected
// Host (DNS rebinding), and an answer must come from the page's own origin as JSON with the token (CSRF).

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { hostname } from 'node:os'
import { messageOf } from '@faber/core'
import type { Context } from 'cordis'
import type Inspector from '../inspector.ts'
import { type LiveEvent, LiveFeed } from './live.ts'
import { webReport } from './view.ts'

export interface WebViewOptions {
  /** default 127.0.0.1 */
  host?: string
  /** default 0: a free port */
  port?: number
  /** required in the URL (`?token=`); default: none on a loopback host, a random one elsewhere */
  token?: string
  /**
   * bytes a page may leave unread on its stream before events for it are skipped (default 8 MB); when it has read
   * them it is told how many it missed and sent a fresh snapshot
   */
  backlogBytes?: number
  /**
   * a report of `faber replay` (what a changed policy would decide differently on recorded calls), served at
   * /api/replay and shown above the calls; the page reads the fields of @faber/cli's ReplayReport
   */
  replay?: object
}

export interface WebView {
  /** where to open it, with the token when there is one */
  url: string
  host: string
  port: number
  token?: string
  /** settles when the view has closed */
  closed: Promise<void>
  close(): Promise<void>
}

const ASSETS: Record<string, [file: string, type: string]> = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  '/style.css': ['style.css', 'text/css; charset=utf-8'],
}
const ASSET_DIR = new URL('../../web/', import.meta.url)
const HEADERS = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}
const MAX_BODY = 4096
// a page that stops reading the stream misses events rather than having them buffered without bound
const MAX_BACKLOG = 8 * 1024 * 1024
// a page that has read nothing for this long is dropped (its browser reconnects by itself)
const STALLED_MS = 120_000
const MAX_STREAMS = 16
const HEARTBEAT_MS = 15_000

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1)$/i
const WILDCARD = /^(0\.0\.0\.0|::|)$/

export const LISTEN = /^(?:(\[[^\]]+\]|[^:[\]]+):)?(\d{1,5})$/

/** `[host:]port` as `faber inspect --web` and `config.web.listen` take it */
export function parseListen(text: string): { host: string; port: number } {
  const match = LISTEN.exec(text.trim())
  const port = Number(match?.[2])
  if (!match || port > 65535) throw new TypeError(`the web view listens on [HOST:]PORT (e.g. 7070, 127.0.0.1:7070, [::1]:7070), got "${text}"`)
  return { host: match[1]?.replace(/^\[|\]$/g, '') ?? '127.0.0.1', port }
}

const bracket = (host: string) => (host.includes(':') ? `[${host}]` : host)
const digest = (text: string) => createHash('sha256').update(text).digest()

/** why a view could not listen, in one sentence (the error keeps its code, e.g. EADDRINUSE) */
function listenFailure(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const where = `${bracket(host)}:${port}`
  const reasons: Record<string, string> = {
    EADDRINUSE: `${where} is already in use: pick another port, or 0 for a free one`,
    EACCES: `not permitted to listen on ${where} (ports below 1024 need privileges): pick another port`,
    EADDRNOTAVAIL: `${bracket(host)} is not an address of this machine`,
    ENOTFOUND: `${host} does not resolve to an address of this machine`,
  }
  const reason = error.code ? reasons[error.code] : undefined
  if (!reason) return error
  return Object.assign(new Error(`the web view cannot listen: ${reason}`), { code: error.code })
}

// one serialization of an event, however many pages are reading
const serialized = new WeakMap<object, string>()
function eventText(type: string, data: object) {
  let text = serialized.get(data)
  if (text === undefined) serialized.set(data, (text = `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`))
  return text
}

function send(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { ...HEADERS, 'content-type': 'application/json; charset=utf-8' })
  res.end(JSON.stringify(body))
}

function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk: string) => {
      body += chunk
      if (body.length > MAX_BODY) {
        resolve(undefined)
        req.destroy()
      }
    })
    req.on('end', () => resolve(body))
    req.on('error', () => resolve(undefined))
  })
}

export async function serveWebView(ctx: Context, inspector: Inspector, options: WebViewOptions = {}): Promise<WebView> {
  const host = options.host ?? '127.0.0.1'
  const loopback = LOOPBACK.test(host)
  const wildcard = WILDCARD.test(host)
  if (options.token !== undefined && !/^[\w-]{16,}$/.test(options.token)) throw new TypeError('the web view token must be at least 16 letters, digits, - or _')
  const token = options.token ?? (loopback ? undefined : randomBytes(24).toString('base64url'))
  const backlog = options.backlogBytes ?? MAX_BACKLOG
  const assets = new Map(Object.entries(ASSETS).map(([path, [file, type]]) => [path, { body: readFileSync(new URL(file, ASSET_DIR)), type }]))
  const feed = new LiveFeed(ctx, inspector)
  const streams = new Set<ServerResponse>()
  let allowed = new Set<string>()

  // compared as digests: the same length whatever was given, in constant time
  const tokenMatches = (given: unknown) => token === undefined || (typeof given === 'string' && timingSafeEqual(digest(given), digest(token)))
  const authorized = (url: URL, req: IncomingMessage) => tokenMatches(url.searchParams.get('token') ?? req.headers['x-faber-token'])

  const stream = (req: IncomingMessage, res: ServerResponse) => {
    if (streams.size >= MAX_STREAMS) return send(res, 503, { error: `the view serves at most ${MAX_STREAMS} pages at once: close one` })
    res.writeHead(200, { ...HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' })
    // the events a page has not read wait in memory up to `backlog` bytes; past that, the page misses events until
    // it has caught up, and is then told how many and sent a fresh snapshot
    let skipped = 0
    let behindSince = 0
    const snapshot = () => res.write(eventText('snapshot', { ...feed.snapshot(), answerer: !!feed.answerer() }))
    // the events of one tick go out in one write (a program's nested calls come thousands at a time)
    let queued: string[] = []
    let queuedBytes = 0
    const flush = () => {
      const text = queued.join('')
      queued = []
      queuedBytes = 0
      if (!res.destroyed) res.write(text)
    }
    const write = (type: string, data: object) => {
      if (behindSince) {
        skipped++
        if (Date.now() - behindSince > STALLED_MS) res.destroy()
        return
      }
      const text = eventText(type, data)
      if (!queued.length) setImmediate(flush)
      queued.push(text)
      queuedBytes += text.length
      if (res.writableLength + queuedBytes > backlog) behindSince = Date.now()
    }
    res.on('drain', () => {
      if (!behindSince) return
      behindSince = 0
      if (!skipped) return
      res.write(eventText('lagged', { skipped, note: `this page read the stream too slowly: ${skipped} events were skipped; a fresh snapshot follows` }))
      skipped = 0
      snapshot()
      if (res.writableLength > backlog) behindSince = Date.now()
    })
    streams.add(res)
    snapshot()
    if (res.writableLength > backlog) behindSince = Date.now()
    const off = feed.subscribe((event: LiveEvent) => write(event.type, event))
    const heartbeat = setInterval(() => {
      if (behindSince && Date.now() - behindSince > STALLED_MS) res.destroy()
      else if (!behindSince) res.write(': ping\n\n')
    }, HEARTBEAT_MS)
    heartbeat.unref()
    const done = () => {
      off()
      clearInterval(heartbeat)
      streams.delete(res)
    }
    req.on('close', done)
    res.on('close', done)
  }

  /** an answer's request, checked: the answerer, the decision and the rest of its body; undefined once refused */
  const admitted = async (req: IncomingMessage, res: ServerResponse) => {
    // a cross-origin page can send a simple POST, never one with this origin, JSON and the token header
    // the token only in its header: a URL can be given to a form or a link, a header only by the page's own script
    if (token !== undefined && !tokenMatches(req.headers['x-faber-token'])) return void send(res, 401, { error: 'an answer needs the token in X-Faber-Token' })
    const origin = req.headers.origin
    if (origin !== `http://${req.headers.host}`) return void send(res, 403, { error: 'answers are accepted from the view itself only (Origin does not match)' })
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) return void send(res, 415, { error: 'send the answer as application/json' })
    const answerer = feed.answerer()
    if (!answerer) return void send(res, 501, { error: 'this deployment has no web answerer; load @faber/plugin-approval#WebAnswerer to answer from the page' })
    const text = await readBody(req)
    let body: { decision?: unknown; remember?: unknown } | undefined
    try {
      body = text === undefined ? undefined : JSON.parse(text)
    } catch {}
    if (typeof body !== 'object' || body === null) return void send(res, 400, { error: `the body is not a JSON object of at most ${MAX_BODY} bytes` })
    const { decision } = body
    if (decision !== 'allow' && decision !== 'reject') return void send(res, 400, { error: 'decision must be "allow" or "reject"' })
    const from = req.socket.remoteAddress
    return { answerer, decision: decision as 'allow' | 'reject', body, from: from && bracket(from) }
  }

  const answer = async (id: string, req: IncomingMessage, res: ServerResponse) => {
    const checked = await admitted(req, res)
    if (!checked) return
    const { answerer, decision, from } = checked
    const { remember } = checked.body
    if (remember !== undefined && remember !== 'once' && remember !== 'session' && remember !== 'always')
      return send(res, 400, { error: 'remember must be "once", "session" or "always"' })
    try {
      const answered = answerer.answer(id, { decision, remember, from })
      if (!answered) return send(res, 404, { error: `approval ${id} is not waiting for the web answerer (answered, cancelled or timed out already)` })
      return send(res, 200, { answered: true })
    } catch (error) {
      // the answerer is any plugin that provides approvalWeb: what it throws may not even turn into text
      return send(res, 400, { error: messageOf(error) })
    }
  }

  // a question another process left in the store: answered there, that process (or the program run again) goes on
  const answerQuestion = async (id: string, req: IncomingMessage, res: ServerResponse) => {
    const checked = await admitted(req, res)
    if (!checked) return
    const { answerer, decision, from } = checked
    if (!(await answerer.answerQuestion(id, { decision, from }))) {
      return send(res, 404, { error: `question ${id} waits for no answer (answered elsewhere, or expired)` })
    }
    return send(res, 200, { answered: true })
  }

  const server = createServer(async (req, res) => {
    try {
      const hostHeader = (req.headers.host ?? '').toLowerCase()
      if (!wildcard && !allowed.has(hostHeader)) return send(res, 403, { error: `unexpected Host "${req.headers.host ?? ''}"` })
      const url = new URL(req.url ?? '/', 'http://view')
      const asset = assets.get(url.pathname)
      if (asset && (req.method === 'GET' || req.method === 'HEAD')) {
        res.writeHead(200, { ...HEADERS, 'content-type': asset.type })
        return res.end(req.method === 'HEAD' ? undefined : asset.body)
      }
      // a browser asks for an icon with every page load: no icon, and no 404 in its console for it
      if (url.pathname === '/favicon.ico') {
        res.writeHead(204, HEADERS)
        return res.end()
      }
      if (!url.pathname.startsWith('/api/')) return send(res, 404, { error: 'not found' })
      if (!authorized(url, req)) return send(res, 401, { error: 'this view needs its token: open the URL it printed, with ?token=' })
      if (req.method === 'GET' && url.pathname === '/api/report') return send(res, 200, webReport(ctx, inspector))
      if (req.method === 'GET' && url.pathname === '/api/events') return stream(req, res)
      if (req.method === 'GET' && url.pathname === '/api/replay') {
        return options.replay ? send(res, 200, options.replay) : send(res, 404, { error: 'this view shows no replay report (faber replay --web serves one)' })
      }
      const approval = /^\/api\/approvals\/([\w-]+)$/.exec(url.pathname)
      if (approval && req.method === 'POST') return await answer(approval[1], req, res)
      if (req.method === 'GET' && url.pathname === '/api/questions') {
        const answerer = feed.answerer()
        return send(res, 200, { questions: answerer ? await answerer.questions() : [] })
      }
      const question = /^\/api\/questions\/([\w-]+)$/.exec(url.pathname)
      if (question && req.method === 'POST') return await answerQuestion(question[1], req, res)
      return send(res, 404, { error: 'not found' })
    } catch (error) {
      // messageOf: a throw here would reject this handler, which nobody awaits, and end the host
      if (!res.headersSent) send(res, 500, { error: messageOf(error) })
      else res.destroy()
    }
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  }).catch((error) => {
    feed.dispose()
    throw listenFailure(error, host, options.port ?? 0)
  })
  const port = (server.address() as AddressInfo).port
  allowed = new Set(['127.0.0.1', 'localhost', '[::1]', ...(wildcard ? [] : [bracket(host).toLowerCase()])].map((name) => `${name}:${port}`))
  const shown = wildcard ? hostname() : bracket(host)
  const url = `http://${shown}:${port}/${token ? `?token=${token}` : ''}`

  let closing: Promise<void> | undefined
  let closedResolve!: () => void
  const closed = new Promise<void>((resolve) => {
    closedResolve = resolve
  })
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      feed.dispose()
      for (const res of streams) res.destroy()
      server.close(() => resolve())
      server.closeAllConnections()
    }).then(closedResolve)
    return closing
  }
  const view: WebView = { url, host, port, closed, close }
  if (token) view.token = token
  return view
}
