// what the HTTP model adapters share: options with defaults, one attempt (`post`: the idle timeout, network errors,
// error statuses, stream or JSON), how a broken stream fails (`streamFailure`), the retry loop (which reports each
// retry before it waits), Retry-After, and a server-sent-events reader. an adapter keeps only its wire format.

import { messageOf } from '@faber/core'
import { ModelError, type ModelRequest, type ModelResponse, type RetryInfo } from './model.ts'

/**
 * an options type whose defaulted keys may be left out but never set to `undefined`: `{ timeoutMs: spec.timeoutMs }`
 * with a `number | undefined` value is a type error, so a caller cannot override a default with nothing.
 */
export type Defined<O, Defaulted extends keyof O> = O & {
  [K in keyof O]: K extends Defaulted ? ({} extends Pick<O, K> ? O[K] : undefined extends O[K] ? never : O[K]) : O[K]
}

/** the options with every undefined value dropped, over the defaults: the runtime half of `Defined` */
export function withDefaults<D extends object, O extends object>(defaults: D, options: O): D & O {
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined))
  return { ...defaults, ...given } as D & O
}

/** Retry-After in ms: delta-seconds or an HTTP date */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (!value) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now)
}

export function defaultSleep(ms: number, signal: AbortSignal) {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', abort)
      resolve()
    }, ms)
    const abort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', abort, { once: true })
  })
}

/** a failure worth another attempt; `reason` is what a person reads in "429 from the model; retrying …" */
export class RetryableError extends ModelError {
  retryAfterMs?: number

  constructor(
    message: string,
    readonly reason: string,
    status?: number,
  ) {
    super(message, status, true)
  }
}

/** one HTTP attempt: aborted with the caller's signal, or after `timeoutMs` without progress */
export class Attempt {
  timedOut = false
  readonly controller = new AbortController()
  private timer?: NodeJS.Timeout
  private unlink: () => void

  constructor(
    outer: AbortSignal,
    private timeoutMs: number,
  ) {
    const abort = () => this.controller.abort(outer.reason)
    outer.addEventListener('abort', abort, { once: true })
    this.unlink = () => outer.removeEventListener('abort', abort)
    this.touch()
  }

  /** progress: restart the idle timer */
  touch() {
    clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timedOut = true
      this.controller.abort(new Error('timeout'))
    }, this.timeoutMs)
  }

  close() {
    clearTimeout(this.timer)
    this.unlink()
  }
}

/** what every HTTP model adapter takes besides where it posts; each adapter's options extend it */
export interface HttpModelOptions {
  model: string
  apiKey?: string
  /** stream the answer (default true) */
  stream?: boolean
  maxTokens?: number
  /** ms without a byte from the server (before the headers or between chunks) before the attempt fails; default 60000 */
  timeoutMs?: number
  /** retries after a 429, a 5xx, a network error or a timeout; default 3 */
  maxRetries?: number
  /** first backoff delay, doubled on each retry and capped at retryMaxMs; default 500 */
  retryBaseMs?: number
  retryMaxMs?: number
  temperature?: number
  headers?: Record<string, string>
  /** merged into the request body as is */
  extraBody?: Record<string, unknown>
  fetch?: typeof fetch
  /** for tests: how to wait between retries */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
}

export interface RetryOptions {
  maxRetries: number
  retryBaseMs: number
  retryMaxMs: number
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
}

/** runs `attempt` until it succeeds, fails for good, or the retries are spent; each retry is reported before the wait */
export async function withRetries<T>(options: RetryOptions, request: ModelRequest, attempt: () => Promise<T>): Promise<T> {
  const sleep = options.sleep ?? defaultSleep
  for (let n = 0; ; n++) {
    try {
      return await attempt()
    } catch (error) {
      if (request.signal.aborted) throw request.signal.reason
      if (!(error instanceof RetryableError) || n >= options.maxRetries) throw error
      const delayMs = error.retryAfterMs ?? Math.min(options.retryMaxMs, options.retryBaseMs * 2 ** n)
      const info: RetryInfo = {
        attempt: n + 2,
        maxAttempts: options.maxRetries + 1,
        delayMs,
        reason: error.reason,
        status: error.status,
        message: error.message,
      }
      request.onRetry?.(info)
      await sleep(delayMs, request.signal)
    }
  }
}

/** the message of a provider's JSON error body, else the start of the text */
export function providerMessage(text: string): string {
  try {
    const body = JSON.parse(text)
    const message = body?.error?.message ?? body?.message ?? body?.error
    if (typeof message === 'string') return message
  } catch {}
  return text.trim().slice(0, 300)
}

/** what went wrong on the wire: the caller's abort as is, else a retryable timeout or network error */
/** what a non-2xx answer means to the caller: credentials, a wrong URL or model, a retryable 429/5xx (529 is Anthropic's "overloaded"), or a rejection */
export async function statusError(name: string, url: string, model: string, response: Response): Promise<ModelError> {
  const text = await response.text().catch(() => '')
  const detail = providerMessage(text)
  const status = response.status
  if (status === 401 || status === 403) {
    return new ModelError(
      `${name}: the server refused the credentials (${status}) at ${url}: ${detail}. Check the API key (and its environment variable).`,
      status,
    )
  }
  if (status === 404) return new ModelError(`${name}: not found (404) at ${url}: ${detail}. Check the base URL and the model name "${model}".`, status)
  if (status === 429 || status >= 500) {
    const error = new RetryableError(`${name}: the server answered ${status} at ${url}: ${detail}`, String(status), status)
    error.retryAfterMs = parseRetryAfter(response.headers.get('retry-after'))
    return error
  }
  return new ModelError(`${name}: the server rejected the request (${status}) at ${url}: ${detail}`, status)
}

/**
 * what a failed fetch says: the system error undici keeps in `cause` (ECONNREFUSED, …), else the error's message. a
 * deployer's `fetch` may throw anything, so nothing here is trusted to turn into text, nor its getters to return
 */
function networkDetail(error: unknown): string {
  try {
    const cause = (error as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause
    const said = cause?.code ?? cause?.message
    if (said !== undefined) return messageOf(said)
  } catch {}
  return messageOf(error)
}

export function transportError(name: string, url: string, timeoutMs: number, error: unknown, attempt: Attempt, outer: AbortSignal, doing: string): Error {
  if (outer.aborted) return outer.reason instanceof Error ? outer.reason : new Error(String(outer.reason))
  if (attempt.timedOut) return new RetryableError(`${name}: no response from ${url} for ${timeoutMs} ms (timeout)`, `no response for ${timeoutMs} ms`)
  const detail = networkDetail(error)
  return new RetryableError(`${name}: network error ${doing} ${url}: ${detail}`, `network error (${detail})`)
}

/** what an adapter hands `post`: where it posts and how, and how it reads each kind of answer */
export interface Endpoint {
  readonly name: string
  readonly url: string
  readonly options: { model: string; stream: boolean; timeoutMs: number; fetch?: typeof fetch; headers?: Record<string, string> }
  readStream(body: ReadableStream<Uint8Array>, request: ModelRequest, attempt: Attempt): Promise<ModelResponse>
  /** `body` is the parsed answer, `text` the answer as sent (for messages) */
  readJson(body: any, text: string, request: ModelRequest): ModelResponse
}

/**
 * one attempt: POSTs the payload with the provider's `headers` (after the JSON ones, before the deployer's), turns
 * network failures, timeouts and error statuses into model errors, and reads the answer as a stream or as JSON
 */
export async function post(endpoint: Endpoint, payload: string, request: ModelRequest, headers: Record<string, string>): Promise<ModelResponse> {
  const { name, url, options } = endpoint
  const doFetch = options.fetch ?? globalThis.fetch
  const attempt = new Attempt(request.signal, options.timeoutMs)
  try {
    let response: Response
    try {
      response = await doFetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: options.stream ? 'text/event-stream' : 'application/json', ...headers, ...options.headers },
        body: payload,
        signal: attempt.controller.signal,
      })
    } catch (error) {
      throw transportError(name, url, options.timeoutMs, error, attempt, request.signal, 'connecting to')
    }
    attempt.touch()
    if (!response.ok) throw await statusError(name, url, options.model, response)
    const type = response.headers.get('content-type') ?? ''
    if (options.stream && type.includes('text/event-stream')) {
      if (!response.body) throw new RetryableError(`${name}: the server sent an empty stream`, 'an empty stream')
      return await endpoint.readStream(response.body, request, attempt)
    }
    let text: string
    try {
      text = await response.text()
    } catch (error) {
      throw transportError(name, url, options.timeoutMs, error, attempt, request.signal, 'reading the answer from')
    }
    let body: any
    try {
      body = JSON.parse(text)
    } catch {
      throw new ModelError(`${name}: the server's answer is not JSON: ${text.slice(0, 200)}`)
    }
    return endpoint.readJson(body, text, request)
  } finally {
    attempt.close()
  }
}

/**
 * a stream that broke off or said something unreadable: worth another attempt while nothing was shown. `reason` is
 * what the retry tells a person, when the provider said more than that the stream broke (e.g. it is overloaded)
 */
export class BrokenStream extends Error {
  constructor(
    message: string,
    readonly reason?: string,
  ) {
    super(message)
  }
}

/**
 * what a failure while reading a stream becomes: a ModelError as it is; before any text or call was shown, a
 * retryable error (another attempt is as good as the first); after, a ModelError that keeps the text as partial
 */
export function streamFailure(endpoint: Endpoint, error: unknown, attempt: Attempt, request: ModelRequest, shown: boolean, text: string): Error {
  if (error instanceof ModelError) return error
  const { name, url, options } = endpoint
  const broken = error instanceof BrokenStream ? error : transportError(name, url, options.timeoutMs, error, attempt, request.signal, 'reading the answer from')
  if (request.signal.aborted) return broken
  const what = error instanceof BrokenStream ? `${name}: ${error.message}` : broken.message
  if (!shown) return new RetryableError(what, (error instanceof BrokenStream && error.reason) || 'the stream broke before any content')
  const failure = new ModelError(what)
  failure.partial = text
  return failure
}

/**
 * reads a text/event-stream body, calling `onEvent(event, data)` per event until it returns true (done) or the body
 * ends; returns whether it was told it is done. every chunk restarts the attempt's idle timer.
 */
export async function readEvents(
  body: ReadableStream<Uint8Array>,
  attempt: Attempt,
  onEvent: (event: string, data: string) => boolean | undefined,
): Promise<boolean> {
  const decoder = new TextDecoder()
  let buffer = ''
  let data: string[] = []
  let event = ''
  let done = false
  const line = (raw: string) => {
    if (raw === '') {
      if (data.length) done = onEvent(event || 'message', data.join('\n')) === true
      data = []
      event = ''
      return
    }
    if (raw.startsWith(':')) return
    const colon = raw.indexOf(':')
    const field = colon < 0 ? raw : raw.slice(0, colon)
    const value = colon < 0 ? '' : raw.slice(colon + 1).replace(/^ /, '')
    if (field === 'data') data.push(value)
    else if (field === 'event') event = value
  }
  const reader = body.getReader()
  try {
    while (!done) {
      const { value, done: ended } = await reader.read()
      if (ended) break
      attempt.touch()
      buffer += decoder.decode(value, { stream: true })
      let newline: number
      while (!done && (newline = buffer.search(/\r?\n/)) >= 0) {
        const raw = buffer.slice(0, newline)
        buffer = buffer.slice(buffer[newline] === '\r' ? newline + 2 : newline + 1)
        line(raw)
      }
    }
    if (!done) {
      buffer += decoder.decode()
      if (buffer) line(buffer)
      line('')
    }
  } finally {
    await reader.cancel().catch(() => {})
  }
  return done
}
