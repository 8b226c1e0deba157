// lossless JSON: a value that survives JSON.stringify/parse unchanged. anything JSON would drop or
// transform (undefined, BigInt, NaN, holes, class instances, cycles) is refused with the path where it sits.

export type Json = null | boolean | number | string | readonly Json[] | { readonly [key: string]: Json }

export class JsonError extends TypeError {
  constructor(
    readonly path: string,
    readonly problem: string,
  ) {
    super(`${path} ${problem}`)
    this.name = 'JsonError'
  }
}

function describe(value: unknown) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  const type = typeof value
  if (type === 'object') {
    const proto = Object.getPrototypeOf(value)
    const name = proto?.constructor?.name
    return name ? `a ${name}` : 'an object'
  }
  return `a ${type}`
}

function refuse(path: string, value: unknown, seen: object[]): never {
  if (typeof value === 'object' && value !== null && seen.includes(value)) {
    throw new JsonError(path, 'refers back to one of its own ancestors (a cycle), which is not JSON; pass a tree')
  }
  switch (typeof value) {
    case 'undefined':
      throw new JsonError(path, 'is undefined, which is not JSON; omit the key or pass null')
    case 'bigint':
      throw new JsonError(path, 'is a BigInt, which is not JSON; pass a number or a string')
    case 'function':
      throw new JsonError(path, 'is a function, which is not JSON; pass data')
    case 'symbol':
      throw new JsonError(path, 'is a symbol, which is not JSON; pass a string')
    case 'number':
      throw new JsonError(path, `is ${value}, which is not JSON; pass a finite number`)
  }
  throw new JsonError(path, `is ${describe(value)}, which is not JSON; pass a plain object, array or primitive`)
}

// path segments are built on every property, so the identifier test is cached (bounded: names come from models)
const segments = new Map<string, string>()

export function segment(name: string): string {
  let text = segments.get(name)
  if (text === undefined) {
    text = /^[A-Za-z_$][\w$]*$/.test(name) ? `.${name}` : `[${JSON.stringify(name)}]`
    if (segments.size < 10000) segments.set(name, text)
  }
  return text
}

function key(path: string, name: string) {
  return path + segment(name)
}

function copy(value: unknown, path: string, seen: object[]): Json {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value
    case 'number':
      if (!Number.isFinite(value)) refuse(path, value, seen)
      // -0 has no JSON spelling: normalize rather than refuse
      return value === 0 ? 0 : value
    case 'object':
      break
    default:
      refuse(path, value, seen)
  }
  if (value === null) return null
  if (seen.includes(value)) refuse(path, value, seen)
  const isArray = Array.isArray(value)
  if (!isArray) {
    const proto = Object.getPrototypeOf(value)
    if (proto !== Object.prototype && proto !== null) refuse(path, value, seen)
  }
  seen.push(value)
  let out: Json
  if (isArray) {
    const items: Json[] = new Array(value.length)
    for (let i = 0; i < value.length; i++) {
      if (!(i in value)) throw new JsonError(`${path}[${i}]`, 'is a hole in a sparse array, which is not JSON; fill it or use null')
      items[i] = copy(read(value, i, path), `${path}[${i}]`, seen)
    }
    out = items
  } else {
    const record: Record<string, Json> = {}
    for (const name of Object.keys(value)) {
      record[name] = copy(read(value, name, path), key(path, name), seen)
    }
    out = record
  }
  seen.pop()
  return Object.freeze(out)
}

function read(target: any, name: string | number, path: string) {
  try {
    return target[name]
  } catch (error) {
    const at = typeof name === 'number' ? `${path}[${name}]` : key(path, name)
    throw new JsonError(at, `could not be read: its getter threw (${error instanceof Error ? error.message : String(error)})`)
  }
}

/** a deep, frozen copy of a lossless-JSON value; throws a JsonError naming the offending path otherwise */
export function snapshot(value: unknown, root = '$'): Json {
  return copy(value, root, [])
}

/** JSON text with object keys sorted: equal values give equal text */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const record = value as Record<string, Json>
  const keys = Object.keys(record).sort()
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(record[k])}`).join(',')}}`
}
