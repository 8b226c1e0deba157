// plugin configs as the web view shows them: JSON, bounded, with secrets masked. a key that names a secret (a
// password, token, API key, cookie, …) has its value replaced whatever its shape; names of environment variables
// (`apiKeyEnv`) are not secrets and stay. bearer / basic credentials and passwords in URLs are masked under any key.

import type { Json } from '@faber/core'

export const MASK = '••••••'

const SECRET_KEY = /pass(word|phrase)?|secret|token|api[-_]?key|auth|credential|cookie|private|signature|^key$|bearer/i
const NOT_SECRET = /Env$/
const BEARER = /^(bearer|basic)\s+\S/i
const USERINFO = /\/\/[^/@\s:]+:[^/@\s]+@/g
const MAX_DEPTH = 8
const MAX_ITEMS = 100
const MAX_STRING = 400

export function isSecretKey(key: string) {
  return SECRET_KEY.test(key) && !NOT_SECRET.test(key)
}

/** a JSON copy of a config with secrets masked, functions and class instances named, and long values cut */
export function maskConfig(value: unknown): Json {
  const seen = new WeakSet<object>()
  const walk = (v: unknown, depth: number, secret: boolean): Json => {
    if (v === undefined) return null
    if (v === null || typeof v === 'boolean') return v
    if (typeof v === 'number') return secret ? MASK : Number.isFinite(v) ? v : String(v)
    if (typeof v === 'string') {
      if (secret && v !== '') return MASK
      if (BEARER.test(v)) return MASK
      // a URL with a password in it: https://user:secret@host
      const text = v.replace(USERINFO, `//${MASK}@`)
      return text.length > MAX_STRING ? `${text.slice(0, MAX_STRING)}… (${text.length - MAX_STRING} more characters)` : text
    }
    if (typeof v === 'function') return `[function ${v.name || 'anonymous'}]`
    if (typeof v !== 'object') return `[${typeof v}]`
    if (seen.has(v)) return '[circular]'
    if (depth >= MAX_DEPTH) return '[…]'
    seen.add(v)
    try {
      if (Array.isArray(v)) {
        const items = v.slice(0, MAX_ITEMS).map((item) => walk(item, depth + 1, secret))
        if (v.length > MAX_ITEMS) items.push(`… (${v.length - MAX_ITEMS} more)`)
        return items
      }
      const proto = Object.getPrototypeOf(v)
      if (proto !== Object.prototype && proto !== null) return `[${(v as object).constructor?.name ?? 'object'}]`
      const out: Record<string, Json> = {}
      for (const [key, item] of Object.entries(v)) out[key] = walk(item, depth + 1, secret || isSecretKey(key))
      return out
    } finally {
      seen.delete(v)
    }
  }
  return walk(value, 0, false)
}
