// a small JSON path: `$`, then `.key`, `["key"]`, `[0]`, `.*` or `[*]`. enough to point at an argument.

import type { Json } from '@faber/core'

type Segment = { key: string } | { index: number } | { any: true }

export type JsonPath = readonly Segment[]

const TOKEN = /\.([A-Za-z_$][\w$-]*)|\.\*|\[\*\]|\[(\d+)\]|\[("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\]/y

export function parseJsonPath(text: string): JsonPath {
  if (typeof text !== 'string' || !text.startsWith('$')) throw new TypeError(`a JSON path starts with "$", e.g. "$.command"; got ${JSON.stringify(text)}`)
  const segments: Segment[] = []
  TOKEN.lastIndex = 1
  while (TOKEN.lastIndex < text.length) {
    const at = TOKEN.lastIndex
    const match = TOKEN.exec(text)
    if (!match) throw new TypeError(`JSON path ${JSON.stringify(text)}: cannot read "${text.slice(at)}"; use .key, ["key"], [0], .* or [*]`)
    if (match[1] !== undefined) segments.push({ key: match[1] })
    else if (match[2] !== undefined) segments.push({ index: Number(match[2]) })
    else if (match[3] !== undefined) segments.push({ key: match[3].startsWith("'") ? match[3].slice(1, -1).replace(/\\(.)/g, '$1') : JSON.parse(match[3]) })
    else segments.push({ any: true })
  }
  return segments
}

/** every value the path selects; a path that leads nowhere selects nothing */
export function selectJson(value: Json, path: JsonPath): Json[] {
  let current: Json[] = [value]
  for (const segment of path) {
    const next: Json[] = []
    for (const item of current) {
      if (item === null || typeof item !== 'object') continue
      if ('any' in segment) next.push(...(Array.isArray(item) ? item : Object.values(item)))
      else if ('index' in segment) {
        if (Array.isArray(item) && segment.index < item.length) next.push(item[segment.index])
      } else if (!Array.isArray(item) && Object.hasOwn(item, segment.key)) next.push((item as Record<string, Json>)[segment.key])
    }
    current = next
  }
  return current
}
