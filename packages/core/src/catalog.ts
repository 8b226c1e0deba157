// what `tools.$search` and `tools.$describe` answer inside a program: a search over the tools one agent can see,
// built once per view (so masks, shadows and presentAs apply as they do to the bindings). these helpers are not
// tools: they read the registry's view, run no body and make no call through the pipeline.

import { describeTools, type SdkTool, sdkTools, summaryOf } from './sdk.ts'

export interface SearchHit {
  name: string
  summary: string
}

interface Entry {
  tool: SdkTool
  name: string
  lower: string
  summary: string
}

const STOP = new Set(['a', 'an', 'the', 'to', 'of', 'and', 'or', 'in', 'on', 'for', 'with', 'by', 'from', 'is', 'it', 'its', 'as', 'at', 'be', 'this', 'that'])
export const SEARCH_LIMIT = 10
const MAX_LIMIT = 50

/** a crude stem, enough to let `files` find `file` and `reading` find `read` */
function stem(word: string) {
  if (word.length > 5 && word.endsWith('ing')) return word.slice(0, -3)
  if (word.length > 4 && word.endsWith('ed')) return word.slice(0, -2)
  if (word.length > 4 && word.endsWith('ies')) return `${word.slice(0, -3)}y`
  if (word.length > 3 && word.endsWith('s') && !word.endsWith('ss')) return word.slice(0, -1)
  return word
}

function words(text: string): string[] {
  const out: string[] = []
  // camelCase and snake_case both split into words
  for (const word of text
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)) {
    if (word && !STOP.has(word)) out.push(stem(word))
  }
  return out
}

const NONE: number[] = []

function push(index: Map<string, number[]>, word: string, i: number) {
  const list = index.get(word)
  if (list) list.push(i)
  else index.set(word, [i])
}

function distance(a: string, b: string) {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
    previous = current
  }
  return previous[b.length]
}

// between names in the joined text the substring scans read; a query term (letters and digits) never holds it
const SEPARATOR = '\u0000'

export class Catalog {
  private entries: Entry[]
  private byName: Map<string, Entry>
  // the scoring reads these instead of visiting every entry per term: entry indexes by name word and by word, and
  // every lower-case name in one text (with each one's start) so a substring is found by indexOf
  private byNameWord = new Map<string, number[]>()
  private byWord = new Map<string, number[]>()
  private names: string
  private starts: number[] = []

  constructor(tools: readonly SdkTool[]) {
    this.entries = sdkTools(tools).map((tool) => ({ tool, name: tool.name, lower: tool.name.toLowerCase(), summary: summaryOf(tool.description) }))
    this.byName = new Map(this.entries.map((entry) => [entry.name, entry]))
    let offset = 0
    for (const [i, { tool, lower }] of this.entries.entries()) {
      for (const word of new Set(words(tool.name))) push(this.byNameWord, word, i)
      for (const word of new Set(words([tool.description, ...propertyText(tool.parameters)].join(' ')))) push(this.byWord, word, i)
      this.starts.push(offset)
      offset += lower.length + 1
    }
    this.names = this.entries.map((entry) => entry.lower).join(SEPARATOR)
  }

  /** the best matches for a query, best first; ties go by name, so the answer is the same every time */
  search(query: string, limit = SEARCH_LIMIT): SearchHit[] {
    const terms = [...new Set(words(query))]
    const whole = query.trim().toLowerCase()
    const bound = Math.min(MAX_LIMIT, Math.max(1, Math.floor(limit) || 1))
    // a name holding the whole query weighs 3; per term, a name word 4, else a name holding it 2, and a word of the
    // description or the argument names 1
    const scores = new Int32Array(this.entries.length)
    if (whole) for (const i of this.holding(whole)) scores[i] += 3
    const named = new Uint8Array(this.entries.length)
    for (const term of terms) {
      named.fill(0)
      for (const i of this.byNameWord.get(term) ?? NONE) {
        scores[i] += 4
        named[i] = 1
      }
      if (term.length >= 3) {
        for (const i of this.holding(term)) if (named[i] === 0) scores[i] += 2
      }
      for (const i of this.byWord.get(term) ?? NONE) scores[i] += 1
    }
    // the best `bound`, best first; entries are in name order, so a later one with an equal score goes after
    const top: number[] = []
    for (let i = 0; i < scores.length; i++) {
      const score = scores[i]
      if (score === 0 || (top.length === bound && score <= scores[top[bound - 1]])) continue
      let at = top.length
      while (at > 0 && scores[top[at - 1]] < score) at--
      top.splice(at, 0, i)
      if (top.length > bound) top.pop()
    }
    return top.map((i) => ({ name: this.entries[i].name, summary: this.entries[i].summary }))
  }

  /** the indexes of the entries whose lower-case name holds `text`, each once, in order */
  private holding(text: string): number[] {
    const found: number[] = []
    if (text.includes(SEPARATOR)) {
      for (const [i, entry] of this.entries.entries()) if (entry.lower.includes(text)) found.push(i)
      return found
    }
    for (let at = this.names.indexOf(text); at !== -1; at = this.names.indexOf(text, at + 1)) {
      // the entry whose name starts at or before `at`
      let lo = 0
      let hi = this.starts.length - 1
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1
        if (this.starts[mid] <= at) lo = mid
        else hi = mid - 1
      }
      if (found.at(-1) !== lo) found.push(lo)
    }
    return found
  }

  /** the complete declarations of the named tools, or the names that are not tools with the nearest ones */
  describe(names: readonly string[]): { ok: true; text: string } | { ok: false; message: string } {
    const missing = names.filter((name) => !this.byName.has(name))
    if (missing.length) {
      const notes = missing.map((name) => {
        const near = this.nearest(name)
        const shown = name.length > 80 ? `${name.slice(0, 79)}…` : name
        return `\`${shown}\` is not a tool${near.length ? `; did you mean ${near.map((n) => `\`${n}\``).join(' or ')}?` : ''}`
      })
      return { ok: false, message: `tools.$describe: ${notes.join('; ')}` }
    }
    return { ok: true, text: describeTools(names.map((name) => this.byName.get(name)!.tool)) }
  }

  /** up to three names close to `name` */
  nearest(name: string): string[] {
    const lower = name.toLowerCase()
    const near = Math.max(2, Math.floor(name.length / 3))
    const scored: [number, string][] = []
    for (const entry of this.entries) {
      let d = entry.lower.includes(lower) || lower.includes(entry.lower) ? 1 : undefined
      // names whose lengths differ by more than `near` are further apart than that: no distance (quadratic) to compute,
      // so a name of megabytes a program sends costs the host a scan, not minutes
      if (d === undefined && Math.abs(lower.length - entry.lower.length) <= near) d = distance(lower, entry.lower)
      if (d !== undefined && d <= near) scored.push([d, entry.name])
    }
    scored.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : 1))
    return scored.slice(0, 3).map(([, n]) => n)
  }
}

/** property names and descriptions, so a search for an argument finds its tool */
function propertyText(parameters: unknown): string[] {
  const properties = (parameters as { properties?: unknown } | null)?.properties
  if (typeof properties !== 'object' || properties === null) return []
  const out: string[] = []
  for (const [name, property] of Object.entries(properties)) {
    out.push(name)
    const description = (property as { description?: unknown } | null)?.description
    if (typeof description === 'string') out.push(description)
  }
  return out
}
