// strict configuration: schemastery keeps keys a schema does not know, so a misspelt key silently turns a setting
// off. `strict(schema)` rejects them, nested objects included, naming the key path and the nearest valid key.

import { Schema } from 'cordis'

type Path = (string | number)[]

/** formats a key path as a deployer writes it: deny[0].reason */
export function keyPath(path: readonly (string | number | symbol)[]): string {
  let out = ''
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else if (typeof key === 'string' && /^[A-Za-z_$][\w$-]*$/.test(key)) out += out ? `.${key}` : key
    else out += `[${JSON.stringify(String(key))}]`
  }
  return out
}

// optimal string alignment distance: a swap of two neighbours (dney → deny) counts as one edit
function distance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)])
  for (let j = 1; j <= b.length; j++) rows[0][j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      rows[i][j] = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) rows[i][j] = Math.min(rows[i][j], rows[i - 2][j - 2] + 1)
    }
  }
  return rows[a.length][b.length]
}

/** the candidate a misspelt `key` most likely meant, when one is close enough to be a guess worth making */
export function nearestKey(key: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined
  let bestDistance = Number.POSITIVE_INFINITY
  for (const candidate of candidates) {
    const d = candidate.toLowerCase() === key.toLowerCase() ? 0.5 : distance(key.toLowerCase(), candidate.toLowerCase())
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined
}

/** an unknown configuration key: `path` leads to it, `detail` says what is wrong without the path */
export class ConfigKeyError extends Schema.ValidationError {
  readonly detail: string

  constructor(path: Path, known: readonly string[]) {
    const key = String(path.at(-1))
    const near = nearestKey(key, known)
    const detail = near
      ? `unknown key; did you mean \`${near}\`?`
      : known.length
        ? `unknown key; expected one of ${known.map((k) => `\`${k}\``).join(', ')}`
        : 'unknown key; nothing is configurable here'
    super(detail, { path })
    this.name = 'ConfigKeyError'
    this.message = `\`${keyPath(path)}\`: ${detail}`
    this.detail = detail
  }

  static isInstance(error: unknown): error is ConfigKeyError {
    return error instanceof Error && error.name === 'ConfigKeyError' && typeof (error as ConfigKeyError).detail === 'string'
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/** the keys an object-like schema knows, with the schema of each; undefined when it is not object-like */
function fieldsOf(schema: Schema): Map<string, Schema> | undefined {
  if (schema.type === 'object') return new Map(Object.entries(schema.dict ?? {}))
  if (schema.type === 'intersect') {
    const fields = new Map<string, Schema>()
    for (const member of schema.list ?? []) {
      const inner = fieldsOf(member)
      if (!inner) return
      for (const [key, value] of inner) if (!fields.has(key)) fields.set(key, value)
    }
    return fields
  }
  if (schema.type === 'transform' && schema.inner) return fieldsOf(schema.inner)
}

function accepts(schema: Schema, data: unknown): boolean {
  try {
    Schema.resolve(data, schema, {})
    return true
  } catch {
    return false
  }
}

/** throws ConfigKeyError for the first key in `data` that `schema` does not know */
export function checkKeys(schema: Schema | undefined, data: unknown, path: Path = []): void {
  // only an object or an array has keys to reject: a string, number or boolean needs no walk, and a union's branches
  // tried against one (`accepts`) would each throw a ValidationError, the costliest part of a plugin's config check
  if (!schema || data === null || typeof data !== 'object') return
  switch (schema.type) {
    case 'object':
    case 'intersect': {
      const fields = fieldsOf(schema)
      if (!fields || !isPlainObject(data)) return
      for (const key of Object.keys(data)) {
        const inner = fields.get(key)
        if (!inner) throw new ConfigKeyError([...path, key], [...fields.keys()])
        checkKeys(inner, data[key], [...path, key])
      }
      return
    }
    case 'dict':
      if (isPlainObject(data)) for (const key of Object.keys(data)) checkKeys(schema.inner, data[key], [...path, key])
      return
    case 'array':
    case 'tuple':
      if (Array.isArray(data)) for (const [index, item] of data.entries()) checkKeys(schema.inner ?? schema.list?.[index], item, [...path, index])
      return
    case 'transform':
      checkKeys(schema.inner, data, path)
      return
    case 'lazy':
      checkKeys(schema.builder?.() as Schema | undefined, data, path)
      return
    case 'union': {
      // the branches the value fits; it is well-formed when one of them knows all its keys
      let first: unknown
      for (const branch of schema.list ?? []) {
        if (!accepts(branch, data)) continue
        try {
          checkKeys(branch, data, path)
          return
        } catch (error) {
          first ??= error
        }
      }
      if (first) throw first
      // no branch takes it: a misspelt required key (`mdoel` for `model`) may be why, so the object branch that knows
      // most of its keys names the one it does not know, rather than leave the deployer with the union's shapes
      if (!isPlainObject(data)) return
      let closest: Schema | undefined
      let known = -1
      for (const branch of schema.list ?? []) {
        const fields = fieldsOf(branch)
        const count = fields ? Object.keys(data).filter((key) => fields.has(key)).length : -1
        if (fields && count > known) [closest, known] = [branch, count]
      }
      checkKeys(closest, data, path)
      return
    }
  }
}

// a config's contents as a string when it is plain data (plain objects, arrays, strings, finite numbers, booleans,
// null), else undefined: a function, a class instance or an undefined value would not show a change in it. walked
// here rather than by JSON.stringify, which would hand a `toJSON` added to the config the say over what it shows
function snapshotOf(value: unknown): string | undefined {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : undefined
  const parts: string[] = []
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const part = snapshotOf(value[index])
      if (part === undefined) return
      parts.push(part)
    }
    return `[${parts.join(',')}]`
  }
  if (!isPlainObject(value)) return
  for (const key of Object.keys(value)) {
    const part = snapshotOf(value[key])
    if (part === undefined) return
    parts.push(`${JSON.stringify(key)}:${part}`)
  }
  return `{${parts.join(',')}}`
}

/**
 * the same schema, rejecting keys it does not know (nested objects, arrays, dicts and unions included) with a
 * ConfigKeyError naming the key path and the nearest valid key. use it on every plugin's Config.
 *
 * a config it produced comes back as it is while it is unchanged: under `ctx.plugin` cordis resolves the plugin's
 * config with this schema and hands the result to the plugin's constructor, which resolves it again (it may be
 * constructed directly, with a config as a deployer writes it). the schemastery walk is most of a config check, and
 * a context setup paid it twice per plugin. what it produced is compared with a snapshot taken then: a config
 * changed since (or one that is not plain data) is checked again
 */
export function strict<S, T>(schema: Schema<S, T>): Schema<S, T> {
  const produced = new WeakMap<object, string>()
  const checked = ((data?: S | null, options?: Parameters<Schema<S, T>>[1]): T => {
    if (options === undefined && typeof data === 'object' && data !== null) {
      const snapshot = produced.get(data)
      if (snapshot !== undefined && snapshot === snapshotOf(data)) return data as unknown as T
    }
    checkKeys(schema, data, (options?.path ?? []) as Path)
    const config = schema(data, options)
    if (typeof config === 'object' && config !== null) {
      const snapshot = snapshotOf(config)
      if (snapshot !== undefined) produced.set(config, snapshot)
    }
    return config
  }) as Schema<S, T>
  Object.assign(checked, schema)
  Object.setPrototypeOf(checked, Object.getPrototypeOf(schema))
  Object.defineProperty(checked, 'uid', { value: schema.uid })
  return checked
}

// what `defineConfig` compares: the key paths of a type, optionality, null and index signatures set aside
// (schemastery's output type marks every key required, its input type every key optional, and adds `& Dict`).
// `Guide` is the schema's side: where the schema says `Schema.any()`, whatever the type has there matches.
type IsAny<T> = 0 extends 1 & T ? true : false
type Named<T> = keyof { [K in keyof T as string extends K ? never : K]: 0 }
type Keys<T, Guide = T> =
  IsAny<Guide> extends true
    ? true
    : T extends (...args: any[]) => unknown
      ? true
      : T extends readonly (infer E)[]
        ? Keys<E, Guide extends readonly (infer G)[] ? G : E>
        : T extends object
          ? { [K in Named<T>]-?: Keys<Exclude<T[K], undefined | null>, K extends Named<Guide> ? Exclude<Guide[K & keyof Guide], undefined | null> : T[K]> }
          : true
type Same<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false
type Drift<S, T, Config, Input> = [T] extends [Config]
  ? [Exclude<Input, undefined>] extends [S]
    ? Same<Keys<T>, Keys<Config, T>> extends true
      ? Same<Keys<S>, Keys<Exclude<Input, undefined>, S>> extends true
        ? unknown
        : { 'the schema and ConfigInput have different keys': Keys<S> }
      : { 'the schema and Config have different keys': Keys<T> }
    : { 'the schema does not accept every ConfigInput': S }
  : { 'the schema does not produce a Config': T }

/**
 * a plugin's Config schema, checked against its two types at compile time instead of cast to them: the schema must
 * produce a `Config`, accept every `ConfigInput`, and have the same keys as both, nested ones included; it is
 * `strict` too. `export const Config = defineConfig<Config, ConfigInput>()(Schema.object({ … }))`
 */
export function defineConfig<Config, Input = Partial<Config>>() {
  return <S, T>(schema: Schema<S, T> & Drift<S, T, Config, Input>): Schema<Input, Config> =>
    // the checks above are what make this assertion sound
    strict(schema) as unknown as Schema<Input, Config>
}
