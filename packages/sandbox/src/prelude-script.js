// evaluated as source text in the program's realm (a vm context or an isolate), before the program. it builds `tools`,
// `console` and `ToolCallError` around `bridge`, the one way out, which takes and returns primitives only and is never
// handed to the program nor to anything it can replace (no `.call`, no callbacks): nothing of the host's realm is
// reachable. nothing here copies, measures or flattens a program's value before checking its length against a budget: a
// string of tens of MB flattened near the memory limit is a fatal out-of-memory for the whole process
;(function setup(crossing, toolNamesJson, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, shared, recordedJson) {
  // `crossing` is of another realm: a stack overflow raised as it is entered is an error of that realm, whose Function
  // must never reach the program. whatever it throws is a refusal
  const bridge = (kind, a, b, c, d) => {
    try {
      return crossing(kind, a, b, c, d)
    } catch {
      return false
    }
  }
  const { parse, stringify } = JSON
  const { keys, getPrototypeOf, getOwnPropertySymbols, getOwnPropertyNames, getOwnPropertyDescriptor, defineProperty, freeze, create } = Object
  const { apply, construct } = Reflect
  const objectPrototype = Object.prototype
  const arrayPrototype = Array.prototype
  const { propertyIsEnumerable: isEnumerable, toString: toStringTag } = objectPrototype
  const { isNaN: isNotNumber, isFinite: isFiniteNumber, isSafeInteger } = Number
  const { some } = arrayPrototype
  const { indexOf: indexOfText } = String.prototype
  const { max: $max, min: $min, floor: $floor } = Math
  const { isArray } = Array
  const $Number = Number
  const $Promise = Promise
  const $Map = Map
  const $Set = Set
  const $TypeError = TypeError
  const $RangeError = RangeError
  const $Error = Error
  const { captureStackTrace } = Error
  const isIdentifier = /^[A-Za-z_$][\w$]*$/
  const locationPattern = /program\.js:(\d+):(\d+)/
  const allocationFailed = /allocation failed/i

  // the clock readings and random numbers read and not yet reported, while the host records them (`recordedJson`)
  let valuesRead
  const flushValues = () => {
    if (valuesRead.length === 0) return
    // written here, not by JSON.stringify: a toJSON the program put on Array.prototype must not shape it
    let json = '['
    for (let i = 0; i < valuesRead.length; i++) json += (i === 0 ? '' : ',') + valuesRead[i]
    valuesRead = []
    bridge('values', json + ']')
  }
  let settled = false
  let used = 0
  let over = false
  // one-unit strings compared, no method of String.prototype: a program's charCodeAt that threw left the run unreported
  const utf8Bytes = (text) => {
    let n = 0
    for (let i = 0; i < text.length; i++) {
      const c = text[i]
      if (c < '\u0080') n += 1
      else if (c < '\u0800') n += 2
      else if (c >= '\ud800' && c < '\udc00' && i + 1 < text.length && text[i + 1] >= '\udc00' && text[i + 1] < '\ue000') {
        n += 4
        i++
      } else n += 3
    }
    return n
  }

  const overLimit = () => {
    over = true
    bridge('limit')
  }
  // false once the budget is spent. utf-8 takes at least a byte per utf-16 unit: a string longer than what is left is over
  const spend = (text) => {
    if (over) return false
    const bytes = text.length > outputBytes - used ? Infinity : utf8Bytes(text)
    if (used + bytes > outputBytes) {
      overLimit()
      return false
    }
    used += bytes
    return true
  }
  const left = () => outputBytes - used

  // thrown by toJson and inspect past their budget, and by toJson past maxJsonDepth; never reach the program
  const tooLarge = freeze(create(null))
  const tooDeep = freeze(create(null))
  // @faber/core's MAX_JSON_DEPTH (bridge.spec checks they agree): bounded here, not by the stack, a deeper value fails
  // alike on every backend and thread (the stack's depth differs between them) and the cycle check stays linear
  const maxJsonDepth = 256
  const deeperThan = `nested deeper than ${maxJsonDepth} levels`

  const key = (path, name) => (isIdentifier.test(name) ? `${path}.${name}` : `${path}[${stringify(name)}]`)
  const typeName = (value) => {
    try {
      return apply(toStringTag, value, []).slice(8, -1)
    } catch {
      return 'object'
    }
  }

  // whether JSON writes `name` as it is between quotes: printable ASCII, no quote or backslash (no method read)
  const plainKey = (name) => {
    for (let i = 0; i < name.length; i++) {
      const c = name[i]
      if (c < ' ' || c > '~' || c === '"' || c === '\\') return false
    }
    return true
  }

  const notJson = (label, path, what, hint) => new $TypeError(`${label} ${path} is ${what}, which is not JSON${hint ? `; ${hint}` : ''}`)

  // lossless JSON: what JSON.stringify would drop, change or choke on is rejected with the path to it (made only for the
  // message, from the frames kept on the way down). one walk, each value read once (a getter runs once), the text counted
  // as it is built: `tooLarge` before it would pass `budget` characters. in a run's fresh context this code starts cold
  // (~8,700 instructions more a call of `{ i }` than flatJson, under callgrind), so the common argument tries flatJson first
  const toJson = (root, label, budget) => {
    const state = { label, budget, size: 0 }
    try {
      return walk(root, undefined, state)
    } catch (error) {
      // the stack gave out first (the program called with little of it left)
      if (error instanceof $RangeError) throw new $TypeError(`${label} is nested too deeply to be JSON`)
      throw error
    }
  }

  // a frame: an object or array being walked, the step (key or index) to the value walked now, and the frame it is in.
  // literals, whose properties are their own (no setter on Object.prototype sees them). the path to frame's step
  const pathTo = (frame) => {
    if (frame === undefined) return '$'
    const at = pathTo(frame.up)
    const step = frame.step
    return typeof step === 'number' ? `${at}[${step}]` : key(at, step)
  }

  const read = (object, frame, state) => {
    try {
      return object[frame.step]
    } catch (error) {
      throw new $TypeError(`${state.label} ${pathTo(frame)} could not be read: its getter threw ${describe(error)}`)
    }
  }

  const add = (state, text) => {
    state.size += text.length
    if (state.size > state.budget) throw tooLarge
    return text
  }

  const walk = (value, up, state) => {
    const { label } = state
    switch (typeof value) {
      case 'string':
        if (value.length + 2 > state.budget - state.size) throw tooLarge
        return add(state, stringify(value))
      case 'boolean':
        return add(state, value ? 'true' : 'false')
      case 'number':
        // (no global such as Infinity is read here: in a vm context that is a call into the host's interceptor)
        if (!isFiniteNumber(value)) throw notJson(label, pathTo(up), isNotNumber(value) ? 'NaN' : 'an infinite number', 'pass null or a string')
        // what JSON writes for a finite number (-0 as 0 too), without a call
        return add(state, `${value}`)
      case 'bigint':
        throw notJson(label, pathTo(up), 'a BigInt', 'pass a string or number')
      case 'undefined':
        throw notJson(label, pathTo(up), 'undefined', 'omit the key or pass null')
      case 'function':
        throw notJson(label, pathTo(up), 'a function', 'pass data, not code')
      case 'symbol':
        throw notJson(label, pathTo(up), 'a symbol', 'pass a string')
    }
    if (value === null) return add(state, 'null')
    for (let frame = up; frame !== undefined; frame = frame.up) {
      if (frame.value === value) throw new $TypeError(`${label} ${pathTo(up)} refers back to ${pathTo(frame.up)} (a cycle), which is not JSON`)
    }
    const proto = getPrototypeOf(value)
    const array = isArray(value)
    if (array ? proto !== arrayPrototype : proto !== objectPrototype && proto !== null) {
      const type = typeName(value)
      const hint = type === 'Date' ? 'pass date.toISOString()' : type === 'Map' ? 'pass Object.fromEntries(map)' : 'pass a plain object or array'
      throw notJson(label, pathTo(up), type === 'Object' ? 'a class instance' : `${/^[AEIOU]/.test(type) ? 'an' : 'a'} ${type}`, hint)
    }
    const depth = up === undefined ? 1 : up.depth + 1
    if (depth > maxJsonDepth) throw tooDeep
    const frame = { value, step: undefined, up, depth }
    add(state, '{}')
    let text
    if (array) {
      const length = value.length
      text = '['
      for (let i = 0; i < length; i++) {
        frame.step = i
        if (!(i in value)) throw notJson(label, pathTo(frame), 'a hole in a sparse array', 'fill it with null')
        if (i) text += add(state, ',')
        text += walk(read(value, frame, state), frame, state)
      }
      return `${text}]`
    }
    const symbols = getOwnPropertySymbols(value)
    if (symbols.length > 0 && apply(some, symbols, [(s) => apply(isEnumerable, value, [s])])) {
      throw notJson(label, pathTo(up), 'an object with symbol keys', 'use string keys')
    }
    const names = keys(value)
    text = '{'
    for (let i = 0; i < names.length; i++) {
      const name = names[i]
      frame.step = name
      if (name.length + 3 > state.budget - state.size) throw tooLarge
      const quoted = name.length <= 16 && plainKey(name) ? `"${name}"` : stringify(name)
      state.size += quoted.length + (i ? 2 : 1)
      text += `${i ? ',' : ''}${quoted}:${walk(read(value, frame, state), frame, state)}`
    }
    return `${text}}`
  }

  // `shared` is calls-script.js's answer, most often of a realm of its own: what its flatJson throws is no answer too
  const { flatJson: sharedFlatJson, makeCalls } = shared
  const flatJson = (value, budget) => {
    try {
      return sharedFlatJson(value, budget, objectPrototype)
    } catch {
      return undefined
    }
  }

  // a longer message or stack is cut to `shown`, one past 1e6 only described: never copied
  const shown = 2000
  const clip = (text) =>
    text.length <= shown ? text : text.length > 1e6 ? `(${text.length} characters, too long to show)` : `${text.slice(0, shown)}… (${text.length} characters)`

  const describe = (error) => {
    try {
      if (error !== null && typeof error === 'object') {
        const { name, message } = error
        if (typeof message === 'string') return `${typeof name === 'string' && name ? clip(name) : 'Error'}: ${clip(message)}`
      }
      return clip(inspect(error, 2, shown))
    } catch {
      return 'a value that could not be described'
    }
  }

  // what console prints for a non-string: JSON-like, bounded in depth and width, never throwing but `tooLarge`
  // once the text passes `budget` characters
  const inspect = (value, depth, budget) => {
    const seen = []
    let size = 0
    // every piece of the text is counted once, when it is made
    const grow = (text) => {
      count(text.length)
      return text
    }
    const count = (n) => {
      size += n
      if (size > budget) throw tooLarge
    }
    const show = (v, level) => {
      switch (typeof v) {
        case 'string':
          if (v.length + 2 > budget - size) throw tooLarge
          return grow(level === 0 ? v : stringify(v))
        case 'number':
          return grow(v === 0 && 1 / v < 0 ? '-0' : `${v}`)
        case 'bigint':
          return grow(`${v}n`)
        case 'symbol':
          return grow(clip(v.toString()))
        case 'undefined':
          return grow('undefined')
        case 'boolean':
          return grow(v ? 'true' : 'false')
        case 'function':
          return grow(`[Function ${clip(v.name || '(anonymous)')}]`)
      }
      if (v === null) return grow('null')
      if (seen.includes(v)) return grow('[Circular]')
      try {
        if (v instanceof $Error) {
          let stack = v.stack
          if (typeof stack === 'string' && stack) {
            if (stack.length > budget - size) throw tooLarge
            // QuickJS's stack holds the frames alone: the name and message go first, as V8 writes them
            if (apply(indexOfText, stack, ['    at ']) === 0) stack = `${describe(v)}\n${stack}`
            return grow(stack)
          }
          return grow(describe(v))
        }
        const type = typeName(v)
        if (level > depth) return grow(isArray(v) ? '[Array]' : `[${type}]`)
        seen.push(v)
        let out
        if (isArray(v)) {
          const items = []
          for (let i = 0; i < v.length && i < 100; i++) {
            count(2)
            items.push(show(v[i], level + 1))
          }
          if (v.length > 100) items.push(grow(`... ${v.length - 100} more`))
          out = `[${items.join(', ')}]`
        } else if (v instanceof $Map || v instanceof $Set) {
          const map = v instanceof $Map
          const items = []
          for (const x of v) {
            count(map ? 6 : 2)
            if (items.push(map ? `${show(x[0], level + 1)} => ${show(x[1], level + 1)}` : show(x, level + 1)) >= 100) break
          }
          out = `${map ? 'Map' : 'Set'}(${v.size}) {${items.join(', ')}}`
        } else if (type === 'Date') {
          out = grow(v.toISOString())
        } else {
          const items = []
          for (const name of keys(v).slice(0, 100)) {
            let x
            try {
              x = v[name]
            } catch {
              x = '[getter threw]'
            }
            if (name.length > budget - size) throw tooLarge
            count(4)
            items.push(`${grow(isIdentifier.test(name) ? name : stringify(name))}: ${show(x, level + 1)}`)
          }
          out = `${type === 'Object' ? '' : `${type} `}{${items.join(', ')}}`
        }
        seen.pop()
        grow('{}')
        return out
      } catch (error) {
        if (error === tooLarge) throw error
        return grow('[uninspectable]')
      }
    }
    return show(value, 0)
  }

  const print = (prefix) =>
    function log(...args) {
      if (settled || over) return
      let line = prefix
      try {
        for (let i = 0; i < args.length; i++) {
          const arg = args[i]
          if (i) line += ' '
          if (typeof arg === 'string' && arg.length > left() - line.length) throw tooLarge
          line += typeof arg === 'string' ? arg : inspect(arg, 4, left() - line.length)
        }
      } catch (error) {
        if (error !== tooLarge) throw error
        return overLimit()
      }
      if (spend(line)) bridge('log', line)
    }

  const sandboxConsole = create(null)
  for (const name of ['log', 'info', 'debug', 'dir', 'warn', 'error']) {
    const prefix = name === 'warn' || name === 'error' ? `[${name}] ` : ''
    defineProperty(sandboxConsole, name, { value: print(prefix), enumerable: true })
  }
  freeze(sandboxConsole)

  class ToolCallError extends $Error {
    constructor(toolName, message, code) {
      super(message)
      this.toolName = toolName
      if (code !== undefined) this.code = code
    }
  }
  defineProperty(ToolCallError.prototype, 'name', { value: 'ToolCallError', writable: true, configurable: true })
  defineProperty(globalThis, 'ToolCallError', { value: ToolCallError, writable: true, configurable: true })

  // where in the program a call was made: line × 2^21 + column (capped at 2^21 - 1), 0 when unknown. read from the
  // stack's text above the binding, at the program's first frame (past a builtin such as forEach that called it). nothing
  // of Error's is touched, which cost ~9 µs a call (the sandbox README, what a call's site costs): a program that set
  // Error.stackTraceLimit to 0 gets no sites, and a prepareStackTrace of its own decides what its calls' stacks say
  const siteHolder = create(null)
  const siteOf = (binding) => {
    try {
      captureStackTrace(siteHolder, binding)
      const match = locate(siteHolder.stack)
      if (match !== null) return +match[1] * 2097152 + $min(+match[2], 2097151)
    } catch {}
    return 0
  }
  // the program's first line and column in a stack's text, unless it is too long to read
  const locate = (stack) => (typeof stack === 'string' && stack.length <= 1e6 ? locationPattern.exec(stack) : null)

  const finished = (name, called) => new ToolCallError(name, `${called} was called after the program finished; the call was not made`)
  // the promise of a call's reply, itself: nothing of the binding's is kept while the call waits (an async binding held
  // ~450 bytes a waiting call), and what is thrown here rejects it, as it would an async function's. a call without an
  // argument means "no arguments", which tools take as an empty object
  const call = (name, called, argument, list, site) => {
    try {
      if (settled) throw finished(name, called)
      let json = '{}'
      if (list || argument !== undefined) {
        try {
          json = list
            ? toJson(argument, `${called}: arguments`, argumentBytes)
            : (flatJson(argument, argumentBytes) ?? toJson(argument, `${called}: argument`, argumentBytes))
        } catch (error) {
          // what the host would refuse it with, said before anything crossed
          if (error === tooDeep) {
            throw new ToolCallError(
              name,
              `${called} was not called: its argument is ${deeperThan}, which is more than a tool call takes; pass a flatter value`,
              'INVALID_ARGUMENTS',
            )
          }
          if (error !== tooLarge) throw error
          // what crosses to the host is held there while the call runs: the run ends rather than copy it
          settled = true
          bridge('memory', 'argument')
          throw new ToolCallError(name, `${called} was not called: its argument is larger than ${argumentBytes} bytes`)
        }
      }
      // a getter of the argument may have made calls, or ended the run, meanwhile
      if (settled) throw finished(name, called)
      // the clock readings and random numbers read so far go first: the host has them before the call they may shape
      if (valuesRead !== undefined) flushValues()
      let reply = 1
      try {
        reply = open(name, json, site)
      } catch {}
      if (typeof reply !== 'object' || reply === null) throw new ToolCallError(name, `${called} could not be sent to the host`)
      return reply
    } catch (error) {
      return new $Promise((_, reject) => reject(error))
    }
  }

  // `$`-prefixed bindings (tools.$search, tools.$describe) are the host's helpers: they take their arguments as a list.
  // a binding holds its name and how the program calls it, nothing else: a run may bind tens of thousands
  const bind = (name) => {
    const called = key('tools', name)
    const binding =
      name[0] === '$' ? (...args) => call(name, called, args, true, siteOf(binding)) : (argument) => call(name, called, argument, false, siteOf(binding))
    defineProperty(binding, 'name', { value: name })
    return binding
  }

  const tools = create(null)
  for (const name of parse(toolNamesJson)) defineProperty(tools, name, { value: bind(name), enumerable: true })
  freeze(tools)

  if (bufferBytes > 0) guardBuffers()
  // (FinalizationRegistry's callbacks run whenever the engine collects garbage: after the run, or during the next one)
  for (const name of ['SharedArrayBuffer', 'Atomics', 'WebAssembly', 'FinalizationRegistry']) {
    try {
      delete globalThis[name]
    } catch {}
  }

  // array buffers live outside the js heap, so a heap limit does not see them; count what the program allocates
  function guardBuffers() {
    let live = 0
    const counted = new WeakSet()
    const { has, add } = WeakSet.prototype
    const registry = new FinalizationRegistry((bytes) => {
      live -= bytes
    })
    const { register } = FinalizationRegistry.prototype
    const $ArrayBuffer = ArrayBuffer
    const typedArray = getPrototypeOf(Uint8Array)
    const isBuffer = (value) => {
      try {
        apply(byteLengthOf, value, [])
        return true
      } catch {
        return false
      }
    }
    const byteLengthOf = getOwnPropertyDescriptor($ArrayBuffer.prototype, 'byteLength').get
    const maxByteLengthOf = getOwnPropertyDescriptor($ArrayBuffer.prototype, 'maxByteLength')?.get ?? byteLengthOf
    const bufferOf = getOwnPropertyDescriptor(typedArray.prototype, 'buffer').get
    const refuse = (bytes) => {
      if (live + bytes <= bufferBytes) return
      bridge('memory', 'buffers')
      throw new $RangeError(`array buffer memory over the limit of ${bufferBytes} bytes`)
    }
    // the engine's own allocator may refuse first (isolated-vm counts buffers against the isolate's limit)
    const allocate = (make) => {
      try {
        return account(make())
      } catch (error) {
        if (error instanceof $RangeError && allocationFailed.test(error.message)) bridge('memory', 'buffers')
        throw error
      }
    }
    const account = (value) => {
      let buffer = value
      if (!isBuffer(buffer)) {
        try {
          buffer = apply(bufferOf, value, [])
        } catch {
          return value
        }
      }
      if (apply(has, counted, [buffer])) return value
      const bytes = apply(maxByteLengthOf, buffer, [])
      refuse(bytes)
      apply(add, counted, [buffer])
      live += bytes
      apply(register, registry, [buffer, bytes])
      return value
    }
    const sizeOf = (args, bytesPerElement) => {
      const first = args[0]
      if (bytesPerElement === 0) {
        const max = args[1] !== null && typeof args[1] === 'object' ? $Number(args[1].maxByteLength) || 0 : 0
        return $max($Number(first) || 0, max)
      }
      if (typeof first !== 'object' || first === null) return ($Number(first) || 0) * bytesPerElement
      if (isBuffer(first)) return 0
      return ($Number(first.length) || 0) * bytesPerElement
    }
    const guard = (target, bytesPerElement) => {
      const proxy = new Proxy(target, {
        construct(target, args, newTarget) {
          refuse(sizeOf(args, bytesPerElement))
          return allocate(() => construct(target, args, newTarget === proxy ? target : newTarget))
        },
      })
      defineProperty(target.prototype, 'constructor', { value: proxy, writable: true, configurable: true })
      defineProperty(globalThis, target.name, { value: proxy, writable: true, configurable: true })
    }
    const wrapMethods = (prototype) => {
      for (const name of getOwnPropertyNames(prototype)) {
        const descriptor = getOwnPropertyDescriptor(prototype, name)
        if (name === 'constructor' || typeof descriptor.value !== 'function') continue
        const method = descriptor.value
        defineProperty(prototype, name, {
          ...descriptor,
          value: {
            [name](...args) {
              return allocate(() => apply(method, this, args))
            },
          }[name],
        })
      }
    }
    guard($ArrayBuffer, 0)
    for (const type of [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, Float32Array, Float64Array]) {
      guard(type, type.BYTES_PER_ELEMENT)
    }
    guard(BigInt64Array, 8)
    guard(BigUint64Array, 8)
    wrapMethods($ArrayBuffer.prototype)
    wrapMethods(typedArray.prototype)
  }

  const fail = (error) => {
    settled = true
    // read without destructuring a list, which calls the program's Array.prototype[Symbol.iterator]: a throw there left
    // the run unreported until its wallMs
    let line
    let column
    try {
      const match = locate(error !== null && typeof error === 'object' ? error.stack : undefined)
      // a stack the program wrote may name a line past any number: no position then
      if (match && isSafeInteger(+match[1]) && isSafeInteger(+match[2])) {
        line = +match[1]
        column = +match[2]
      }
    } catch {}
    const at = column === undefined ? '' : ` (line ${line}, column ${column})`
    let message = `${describe(error)}${at}`
    // the program may have replaced the builtins used below; then the plain description stands
    try {
      if (error instanceof ToolCallError) {
        const code = typeof error.code === 'string' ? ` ${error.code}` : ''
        message = `uncaught ToolCallError${code} from ${key('tools', `${error.toolName}`)}${at}: ${error.message}; catch it with try/catch (error.code says why) to recover inside the program`
      }
    } catch {}
    bridge('throw', message, line, column)
  }

  const start = async (main) => {
    let value
    try {
      value = await main(tools, sandboxConsole)
    } catch (error) {
      return fail(error)
    }
    let json
    try {
      json = value === undefined ? undefined : toJson(value, 'the return value', left())
    } catch (error) {
      if (error === tooDeep) return fail(new $TypeError(`the return value is ${deeperThan}, which is more than a result takes; return a flatter value`))
      if (error !== tooLarge) return fail(error)
      settled = true
      return overLimit()
    }
    settled = true
    if (json !== undefined && !spend(json)) return
    bridge('done', json)
  }

  // a failed call's error points at where the program made the call (its site), wherever the program awaits it
  const failed = (name, text, code, site) => {
    const error = new ToolCallError(name, text, code)
    const at = site > 0 ? `\n    at program.js:${$floor(site / 2097152)}:${site % 2097152}` : ''
    defineProperty(error, 'stack', { __proto__: null, value: `ToolCallError: ${text}${at}`, writable: true, configurable: true })
    return error
  }

  // the host's replies go to `deliver`; the Promise and parse taken from this realm before the program ran make what the
  // program gets. the executor is this realm's: V8 refuses a Promise made with one of a realm whose context was entered
  let settling
  const capture = (resolve, reject) => {
    settling.resolve = resolve
    settling.reject = reject
  }
  const promiseFor = (record) => {
    settling = record
    const reply = new $Promise(capture)
    settling = undefined
    return reply
  }
  const { open, deliver } = makeCalls(promiseFor, parse, failed, maxPendingCalls, crossing)

  const refuseImport = () => new $TypeError('import() is not available to programs; use tools')

  // when the host records the clock and random numbers (`recordedJson`: what an earlier run read), the program reads
  // those first, in order, and what it reads beyond them is reported ('values') before its next tool call: a program
  // run again after a checkpoint reads what it read the first time. a program may still replace them, as anything
  if (typeof recordedJson === 'string') {
    const replayed = parse(recordedJson)
    valuesRead = []
    let read = 0
    const $Date = Date
    const $now = $Date.now
    const $random = Math.random
    const value = (live) => {
      if (read < replayed.length) return replayed[read++]
      read++
      const fresh = live()
      defineProperty(valuesRead, valuesRead.length, { __proto__: null, value: fresh, writable: true, enumerable: true, configurable: true })
      if (valuesRead.length >= 1024) flushValues()
      return fresh
    }
    const now = () => value($now)
    // Date and Math.random themselves behind a Proxy: their name, length, prototype, UTC and parse, as they are
    const RecordedDate = new Proxy($Date, {
      __proto__: null,
      apply: () => new $Date(now()).toString(),
      construct: (_, args, newTarget) => construct($Date, args.length === 0 ? [now()] : args, newTarget),
    })
    $Date.now = now
    defineProperty($Date.prototype, 'constructor', { __proto__: null, value: RecordedDate, writable: true, configurable: true, enumerable: false })
    globalThis.Date = RecordedDate
    Math.random = new Proxy($random, { __proto__: null, apply: () => value($random) })
  }

  return freeze({ start, deliver, refuseImport })
})
