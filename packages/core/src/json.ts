// lossless JSON: a value that survives JSON.stringify/parse unchanged. anything JSON would drop or
// transform (undefined, BigInt, NaN, holes, class instances, cycles) is refused with the path where it sits.
// the snapshot walks with an explicit stack, so no input can overflow the host's stack, and it is total: proxies,
// getters and anything else that throws while being read become a JsonError naming the path, never a raw throw.

import { messageOf } from './message.ts'

export type Json = null | boolean | number | string | readonly Json[] | { readonly [key: string]: Json }

/**
 * deepest nesting of arrays and objects a snapshot accepts (the root container is level 1): far deeper than any tool's
 * arguments or result, and shallow enough for everything downstream that recurses (JSON.stringify, validators,
 * plugins matching arguments). serde_json's default limit is 128.
 */
export const MAX_JSON_DEPTH = 256

/**
 * most values (primitives and containers, each counted every time it is reached) a snapshot accepts. it bounds the
 * time and memory one snapshot can take: a few shared references can describe a tree exponentially larger than
 * themselves, and that tree is what JSON (and every consumer) would see.
 */
export const MAX_JSON_VALUES = 1_000_000

export class JsonError extends TypeError {
  constructor(
    readonly path: string,
    readonly problem: string,
  ) {
    super(`${path} ${problem}`)
    this.name = 'JsonError'
  }
}

// path segments are built for validation messages, so the identifier test is cached (bounded: names come from models)
const segments = new Map<string, string>()
const LONG_NAME = 64

export function segment(name: string): string {
  let text = segments.get(name)
  if (text === undefined) {
    if (/^[A-Za-z_$][\w$]*$/.test(name) && name.length <= LONG_NAME) text = `.${name}`
    // a key can be megabytes long: a path shows its start
    else text = name.length <= LONG_NAME ? `[${JSON.stringify(name)}]` : `[${JSON.stringify(name.slice(0, LONG_NAME))}…]`
    if (segments.size < 10000 && name.length <= LONG_NAME) segments.set(name, text)
  }
  return text
}

/** a path a person can read: a very deep one keeps its start and its end */
function readable(path: string) {
  return path.length <= 240 ? path : `${path.slice(0, 110)} … ${path.slice(-110)}`
}

function describe(proto: object) {
  try {
    const name = proto?.constructor?.name
    return typeof name === 'string' && name ? `${/^[AEIOU]/.test(name) ? 'an' : 'a'} ${name}` : 'an object'
  } catch {
    return 'an object'
  }
}

function scalarProblem(value: unknown): string {
  switch (typeof value) {
    case 'undefined':
      return 'is undefined, which is not JSON; omit the key or pass null'
    case 'bigint':
      return 'is a BigInt, which is not JSON; pass a number or a string'
    case 'function':
      return 'is a function, which is not JSON; pass data'
    case 'symbol':
      return 'is a symbol, which is not JSON; pass a string'
    default:
      return `is ${value}, which is not JSON; pass a finite number`
  }
}

/** one container being copied: its source, its copy, and the index of the child being read */
interface Frame {
  source: any
  out: any
  /** the source's keys; undefined for an array */
  keys: string[] | undefined
  length: number
  index: number
}

// every empty container copies to the same frozen one: nothing to copy or freeze, and nothing to tell them apart by
export const EMPTY_OBJECT: Json = Object.freeze({})
const EMPTY_ARRAY: Json = Object.freeze([])

const NOT_JSON = Symbol('not JSON')

/** a scalar as JSON has it (-0 becomes 0: JSON has no spelling for it, so it is normalized rather than refused), or NOT_JSON */
function jsonScalar(value: unknown): Json | typeof NOT_JSON {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value
    case 'number':
      return Number.isFinite(value) ? (value === 0 ? 0 : value) : NOT_JSON
  }
  return value === null ? null : NOT_JSON
}

// a cycle is a container met again among its open ancestors: the first few are scanned, deeper ones kept in a set
const SCANNED = 32

class Snapshot {
  private stack: Frame[] = []
  private deep: Set<object> | undefined
  private budget = MAX_JSON_VALUES
  private root = '$'

  /** copies `value` (under `root` in its paths); a walk that returns leaves no frame open, one that throws drops its frames */
  run(value: object, root: string): Json {
    this.root = root
    this.budget = MAX_JSON_VALUES
    try {
      return this.walk(value)
    } catch (error) {
      // nothing a failed walk read stays held
      this.stack.length = 0
      this.deep = undefined
      throw error
    }
  }

  private walk(value: object): Json {
    const { stack } = this
    let frame = this.open(value)
    for (;;) {
      if (frame.index === frame.length) {
        // an empty container's copy is the shared frozen one of its kind already
        const done = frame.length > 0 ? Object.freeze(frame.out) : frame.out
        if (stack.length > SCANNED) this.deep!.delete(frame.source)
        stack.pop()
        if (stack.length === 0) return done
        frame = stack[stack.length - 1]
        this.put(frame, done)
        continue
      }
      const child = this.read(frame)
      if (typeof child === 'object' && child !== null) frame = this.open(child)
      else this.put(frame, this.scalar(child))
    }
  }

  /** the path of the value being read: the root, then each open container's current child */
  private path() {
    let path = this.root
    for (const { keys, index } of this.stack) path += keys ? segment(keys[index]) : `[${index}]`
    return readable(path)
  }

  private fail(problem: string): never {
    throw new JsonError(this.path(), problem)
  }

  private count() {
    if (--this.budget < 0) this.tooLarge()
  }

  private tooLarge(): never {
    this.fail(`makes the value larger than ${MAX_JSON_VALUES} values, which is more than a tool call takes; pass less`)
  }

  private scalar(value: unknown): Json {
    this.count()
    const json = jsonScalar(value)
    if (json === NOT_JSON) this.fail(scalarProblem(value))
    return json
  }

  /** starts copying a container: checks it and pushes its frame */
  private open(value: object): Frame {
    this.count()
    if (this.isAncestor(value)) this.fail('refers back to one of its own ancestors (a cycle), which is not JSON; pass a tree')
    if (this.stack.length >= MAX_JSON_DEPTH) {
      this.fail(`is nested deeper than ${MAX_JSON_DEPTH} levels, which is more than a tool call takes; pass a flatter value`)
    }
    let frame: Frame
    try {
      if (Array.isArray(value)) {
        const { length } = value
        // a proxy can claim any length: checked before the copy is allocated
        if (!Number.isSafeInteger(length) || length < 0) this.fail(`claims a length of ${String(length)}, which no array has; pass a plain array`)
        if (length > MAX_JSON_VALUES) this.fail(`is an array of ${length} items, more than the ${MAX_JSON_VALUES} values a tool call takes; pass less`)
        if (length > this.budget) this.tooLarge()
        frame = { source: value, out: length ? new Array(length) : EMPTY_ARRAY, keys: undefined, length, index: 0 }
      } else {
        const proto = Object.getPrototypeOf(value)
        if (proto !== Object.prototype && proto !== null) {
          this.fail(`is ${describe(proto)}, which is not JSON; pass a plain object, array or primitive`)
        }
        const keys = Object.keys(value)
        if (keys.length > this.budget) this.tooLarge()
        frame = { source: value, out: keys.length ? {} : EMPTY_OBJECT, keys, length: keys.length, index: 0 }
      }
    } catch (error) {
      if (error instanceof JsonError) throw error
      this.fail(`could not be read (${messageOf(error, 200)}); pass plain data`)
    }
    if (this.stack.push(frame) > SCANNED) (this.deep ??= new Set()).add(value)
    return frame
  }

  private isAncestor(value: object) {
    const { stack } = this
    for (let i = 0; i < stack.length && i < SCANNED; i++) if (stack[i].source === value) return true
    return this.deep?.has(value) === true
  }

  /** the child at the frame's index, read once; a throwing getter or proxy trap is refused at its path */
  private read(frame: Frame): unknown {
    const { source, keys, index } = frame
    try {
      if (keys) return source[keys[index]]
      if (!(index in source)) this.fail('is a hole in a sparse array, which is not JSON; fill it or use null')
      return source[index]
    } catch (error) {
      if (error instanceof JsonError) throw error
      this.fail(`could not be read: reading it threw (${messageOf(error)}); pass plain data`)
    }
  }

  private put(frame: Frame, value: Json) {
    const { out, keys, index } = frame
    if (!keys) out[index] = value
    // a key is data: `__proto__` becomes an own property instead of replacing the copy's prototype
    else if (keys[index] === '__proto__') Object.defineProperty(out, '__proto__', { value, enumerable: true, writable: true, configurable: true })
    else out[keys[index]] = value
    frame.index = index + 1
  }
}

let idle: Snapshot | undefined = new Snapshot()

/**
 * a deep, frozen copy of a lossless-JSON value; throws a JsonError naming the offending path otherwise, and nothing
 * else whatever the value is. at most MAX_JSON_DEPTH levels and MAX_JSON_VALUES values; time linear in the values read.
 */
export function snapshot(value: unknown, root = '$'): Json {
  if (typeof value === 'object' && value !== null) {
    // one walker serves every snapshot but one taken while another is walking (inside a getter it reads)
    const walker = idle ?? new Snapshot()
    idle = undefined
    try {
      return walker.run(value, root)
    } finally {
      idle = walker
    }
  }
  // a scalar (most results are null, a string or a number) needs no walk
  const json = jsonScalar(value)
  if (json === NOT_JSON) throw new JsonError(readable(root), scalarProblem(value))
  return json
}

/**
 * what snapshot makes of a value fresh from JSON.parse that nothing else holds, without copying it: JSON.parse makes only
 * plain data, so the value is frozen in place when it is within the snapshot's bounds (depth, values, finite numbers,
 * no -0); anything else goes to snapshot, which copies or throws its JsonError. a nested call's argument crosses the
 * sandbox boundary as text, and this is its one snapshot
 */
export function adoptParsed(value: unknown, root = '$'): Json {
  if (typeof value === 'object' && value !== null && freezeParsed(value, 1, { left: MAX_JSON_VALUES })) return value as Json
  return snapshot(value, root)
}

function freezeParsed(value: object, depth: number, count: { left: number }): boolean {
  if (depth > MAX_JSON_DEPTH || --count.left < 0) return false
  const record = value as Record<string, unknown>
  // own keys only: an enumerable property polluting Object.prototype is not the value's
  const keys = Array.isArray(value) ? undefined : Object.keys(value)
  const length = keys ? keys.length : (value as unknown[]).length
  for (let i = 0; i < length; i++) {
    const child = keys ? record[keys[i]] : (value as unknown[])[i]
    if (typeof child === 'object' && child !== null) {
      if (!freezeParsed(child, depth + 1, count)) return false
    } else if (--count.left < 0 || (typeof child === 'number' && (!Number.isFinite(child) || Object.is(child, -0)))) {
      return false
    }
  }
  Object.freeze(value)
  return true
}

/** JSON text with object keys sorted: equal values give equal text */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const record = value as Record<string, Json>
  const keys = Object.keys(record).sort()
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(record[k])}`).join(',')}}`
}
