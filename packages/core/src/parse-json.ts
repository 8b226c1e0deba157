// JSON.parse for the argument text of a nested call, which run_code reads once per call. most arguments are a flat object
// of plain values in the form JSON.stringify writes (`{"path":"src/a.ts","limit":20}`), and for those V8's JSON.parse
// costs mostly its fixed price of entering the runtime: several times what reading them here does. so that one shape is
// read here, and anything else (nesting, an escape, a fraction, whitespace, a key an object already has) is left to
// JSON.parse. the value is the same either way, and text that is not JSON throws JSON.parse's SyntaxError.

const QUOTE = 0x22
const COMMA = 0x2c
const MINUS = 0x2d
const ZERO = 0x30
const NINE = 0x39
const COLON = 0x3a
const BACKSLASH = 0x5c
const OPEN = 0x7b
const CLOSE = 0x7d
// digits an integer may have to be read exactly here (below 2^53); a longer one is left to JSON.parse
const MAX_DIGITS = 15

export function parseJson(text: string): unknown {
  return flatObject(text) ?? JSON.parse(text)
}

// the flat object `text` is, or undefined when it is anything else
function flatObject(text: string): Record<string, unknown> | undefined {
  const end = text.length - 1
  if (text.charCodeAt(0) !== OPEN || text.charCodeAt(end) !== CLOSE) return undefined
  const object: Record<string, unknown> = {}
  if (end === 1) return object
  let at = 1
  for (;;) {
    if (text.charCodeAt(at) !== QUOTE) return undefined
    const keyEnd = plainStringEnd(text, at + 1, end)
    if (keyEnd === -1 || text.charCodeAt(keyEnd + 1) !== COLON) return undefined
    const key = text.slice(at + 1, keyEnd)
    // a key the object already has, or inherits (`__proto__`, or one a frozen Object.prototype would refuse to shadow):
    // JSON.parse defines it where an assignment would not
    if (key in object) return undefined
    at = keyEnd + 2
    const first = text.charCodeAt(at)
    let value: unknown
    if (first === QUOTE) {
      const valueEnd = plainStringEnd(text, at + 1, end)
      if (valueEnd === -1) return undefined
      value = text.slice(at + 1, valueEnd)
      at = valueEnd + 1
    } else if (first === MINUS || (first >= ZERO && first <= NINE)) {
      const negative = first === MINUS
      let digit = negative ? at + 1 : at
      const from = digit
      let integer = 0
      for (let c = text.charCodeAt(digit); c >= ZERO && c <= NINE; c = text.charCodeAt(++digit)) integer = integer * 10 + (c - ZERO)
      const digits = digit - from
      // none, a leading zero, or more than can be exact here: JSON.parse says what it is
      if (digits === 0 || digits > MAX_DIGITS || (digits > 1 && text.charCodeAt(from) === ZERO)) return undefined
      value = negative ? -integer : integer
      at = digit
    } else if (text.startsWith('true', at)) {
      value = true
      at += 4
    } else if (text.startsWith('false', at)) {
      value = false
      at += 5
    } else if (text.startsWith('null', at)) {
      value = null
      at += 4
    } else {
      return undefined
    }
    object[key] = value
    if (at === end) return object
    if (text.charCodeAt(at) !== COMMA) return undefined
    at++
  }
}

// where a string that starts at `from` ends (its closing quote, before `end`), or -1 when it has an escape or a control
// character (JSON.parse reads the one and refuses the other) or no end
function plainStringEnd(text: string, from: number, end: number) {
  for (let at = from; at < end; at++) {
    const c = text.charCodeAt(at)
    if (c === QUOTE) return at
    if (c === BACKSLASH || c < 0x20) return -1
  }
  return -1
}
