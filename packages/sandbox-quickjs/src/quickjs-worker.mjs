// the quickjs backend's thread (plain js: a .ts worker entry does not load under tsx on node 20): one QuickJS module whose
// WebAssembly memory has a maximum, one program at a time, each in a fresh runtime and context. it posts the contract's
// reports, `[run id, kind, a, b, c, heap]`, in a list once the program waits. a run that failed past the prelude is never
// tidied up (a runtime that ran out of memory aborts when its context is freed): the host ends this thread
import { parentPort, workerData } from 'node:worker_threads'
import variant from '@jitl/quickjs-ng-wasmfile-release-sync'
import { newQuickJSWASMModuleFromVariant, newVariant } from 'quickjs-emscripten-core'

const { prelude, calls, memoryBytes, stackBytes, wasmModule, shared } = workerData
// ms spent making contexts and evaluating the prelude: active time that is not a program's
const setupMs = new Float64Array(shared, 0, 1)
const timed = (make) => {
  const from = performance.now()
  try {
    return make()
  } finally {
    setupMs[0] += performance.now() - from
  }
}
const pages = Math.ceil(memoryBytes / 65536)
const memory = new WebAssembly.Memory({ initial: Math.min(256, pages), maximum: pages })
const QuickJS = await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmMemory: memory, wasmModule }))
// the program's first line shares the wrapper's (QuickJS takes no line offset): its columns there are shifted back
const header = '(async function (tools, console) {'
const outOfMemory = /^InternalError: out of memory/
// under the memory's maximum: most bombs end as QuickJS's catchable out-of-memory
const limit = Math.max(8 << 20, memoryBytes - (8 << 20))
// QuickJS throws null when it cannot allocate even the error; the memory never shrinks, so a later null counts too
const ranOut = (message) => outOfMemory.test(message) || (message === 'null' && memory.buffer.byteLength >= limit)
const location = /program\.js:(\d+):(\d+)/
let current

// a step's calls go together once it is over; a line or an end goes at once (a program computing on is ended from the
// host, with what it printed)
let out = []
const post = (message) => {
  out.push(message)
  if (message[1] !== 'call' && !warming) flush()
}
let warming = true
const flush = () => {
  if (out.length === 0) return
  parentPort.postMessage(out)
  out = []
}

const nonStandard = 'delete globalThis.queueMicrotask; delete globalThis.performance; delete globalThis.DOMException'
const fresh = () =>
  timed(() => {
    const runtime = QuickJS.newRuntime()
    runtime.setMemoryLimit(limit)
    runtime.setMaxStackSize(stackBytes)
    const vm = runtime.newContext()
    // QuickJS-ng's additions a V8 context lacks
    vm.unwrapResult(vm.evalCode(nonStandard, 'faber-globals.js')).dispose()
    const shared = vm.unwrapResult(vm.evalCode(calls, 'faber-calls.js'))
    return { runtime, vm, shared, setup: vm.unwrapResult(vm.evalCode(prelude, 'faber-prelude.js')) }
  })
// the next run's, made while this thread waits: the prelude's compile is most of a trivial run
let next
const prepareNext = () => {
  if (next !== undefined || current !== undefined) return
  try {
    next = fresh()
  } catch {}
}

function run({ id, code, tools, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, memoryMessage, recorded }) {
  const { runtime, vm, shared, setup } = next ?? fresh()
  next = undefined
  // freed after a clean end (QuickJS asserts on a runtime freed with objects alive)
  const held = []
  const hold = (handle) => {
    held.push(handle)
    return handle
  }
  const state = { id, vm, runtime, held, reported: undefined, broken: false, deliver: undefined, outOfMemory: [id, 'failed', 'memory', memoryMessage] }
  current = state
  const value = (handle) => {
    const type = vm.typeof(handle)
    return type === 'string' ? vm.getString(handle) : type === 'number' ? vm.getNumber(handle) : undefined
  }
  // the program's only way out: primitives in, a boolean back. its end stands once its jobs are done (drain)
  const crossing = vm.newFunction('crossing', (...handles) => {
    if (current !== state || state.reported || state.broken) return vm.false
    const [kind, a, b, c, d] = handles.map(value)
    if (kind === 'call' || kind === 'log' || kind === 'values') post([id, kind, a, b, c, kind === 'call' ? site(d) : d])
    else if (kind === 'done') state.reported = [id, kind, a]
    else if (kind === 'throw') state.reported = ranOut(a) ? state.outOfMemory : [id, kind, ...shifted(a, b, c)]
    else if (kind === 'limit' || kind === 'memory') return stop(state, [id, kind, a])
    else return vm.false
    return vm.true
  })
  held.push(crossing, setup, shared)
  try {
    const numbers = [outputBytes, bufferBytes, argumentBytes, maxPendingCalls].map((n) => hold(vm.newNumber(n)))
    const toolsJson = hold(vm.newString(JSON.stringify(tools)))
    // the clock readings and random numbers an earlier run read, read again first (CodeRunRequest.values)
    const replay = recorded === undefined ? vm.undefined : hold(vm.newString(recorded))
    const api = hold(timed(() => vm.unwrapResult(vm.callFunction(setup, vm.undefined, crossing, toolsJson, ...numbers, shared, replay))))
    const start = hold(vm.getProp(api, 'start'))
    state.deliver = hold(vm.getProp(api, 'deliver'))
    const main = vm.evalCode(`${header}${code}\n})`, 'program.js')
    if (main.error) {
      const error = vm.dump(main.error)
      main.error.dispose()
      const [, line, column] = location.exec(String(error?.stack)) ?? []
      const message = `${error?.name}: ${error?.message}${line ? ` (line ${line})` : ''}`
      state.reported = [id, 'throw', ...shifted(message, line && +line, column && +column)]
    } else {
      hold(main.value)
      hold(vm.unwrapResult(vm.callFunction(start, vm.undefined, main.value)))
    }
    drain(state)
  } catch (error) {
    fault(state, error)
  }
}

// a call's site, and a column, on the wrapper's line as the program wrote it
const site = (at) => (typeof at === 'number' && at >= 2 ** 21 && at < 2 ** 22 ? at - header.length + 1 : at)

function shifted(message, line, column) {
  if (line !== 1 || typeof column !== 'number') return [message, line, column]
  // (QuickJS counts one short there: `null.x` right after the wrapper is at 34, not 35)
  const at = column - header.length + 1
  return [typeof message === 'string' ? message.replace(`(line 1, column ${column})`, `(line 1, column ${at})`) : message, line, at]
}

function stop(state, message) {
  state.broken = true
  post(message)
  return state.vm.false
}

// runs the program's jobs until none is left: what it reported then stands
function drain(state) {
  const jobs = state.runtime.executePendingJobs(-1)
  if (jobs.error) {
    const error = state.vm.dump(jobs.error)
    throw new Error(`${error?.name}: ${error?.message}`)
  }
  if (state.broken || !state.reported) return
  if (state.reported[1] === 'failed') return void stop(state, state.reported)
  current = undefined
  for (const handle of state.held) if (handle.alive) handle.dispose()
  state.vm.dispose()
  state.runtime.dispose()
  const [id, kind, a, b, c] = state.reported
  post([id, kind, a, b, c, memory.buffer.byteLength])
  setImmediate(prepareNext)
}

// QuickJS or its module failed under the program (an allocation, its own stack): the host ends this thread
function fault(state, error) {
  state.broken = true
  const full = memory.buffer.byteLength >= (pages - 16) * 65536
  const message = String(error?.message ?? error)
  post(full || outOfMemory.test(message) ? state.outOfMemory : [state.id, 'failed', 'crash', `QuickJS failed: ${message.slice(0, 500)}`])
}

const replies = (id, list) => {
  const state = current
  if (state === undefined || state.id !== id) return
  const { vm } = state
  try {
    for (const [call, ok, text, code] of list) {
      if (state.reported || state.broken) break
      const args = [vm.newNumber(call), vm.newString(text), code === undefined ? vm.undefined : vm.newString(String(code))]
      const result = vm.callFunction(state.deliver, vm.undefined, args[0], ok ? vm.true : vm.false, args[1], args[2])
      for (const handle of args) if (handle.alive) handle.dispose()
      vm.unwrapResult(result).dispose()
    }
    drain(state)
  } catch (error) {
    fault(state, error)
  }
}

parentPort.on('message', (message) => {
  if (message.t === 'run') run(message)
  else if (message.t === 'replies') replies(message.id, message.list)
  flush()
})
// V8 compiles the module's functions as they are first called: here, not in the first programs' cpu time
for (let i = 0; i < 2; i++) {
  run({
    id: -1,
    code: 'await tools.warm({})\nreturn 1',
    tools: ['warm'],
    outputBytes: 4096,
    bufferBytes: 1 << 20,
    argumentBytes: 1 << 20,
    maxPendingCalls: 1024,
  })
  const call = out[0]?.[2]
  out = []
  replies(-1, [[call, true, 'null']])
  out = []
}
warming = false
parentPort.postMessage({ t: 'ready' })
