// the quickjs backend's thread (plain js: a .ts worker entry does not load under tsx on node 20). it holds one QuickJS
// module whose WebAssembly memory has a maximum, so a program's allocations end inside it as out-of-memory, and runs one
// program at a time, each in a fresh runtime and context with @faber/sandbox's prelude evaluated in it. it talks to the
// host in the contract's reports, `[run id, kind, a, b, c, heap]`, posted in a list once the program waits: one message
// for all the calls a step made, not one each. a run that failed in a way the prelude did not catch is
// never tidied up (a runtime that ran out of memory aborts when its context is freed): the host ends this thread, and the
// module with it
import { parentPort, workerData } from 'node:worker_threads'
import variant from '@jitl/quickjs-ng-wasmfile-release-sync'
import { newQuickJSWASMModuleFromVariant, newVariant } from 'quickjs-emscripten-core'

const { prelude, calls, memoryBytes, stackBytes, wasmModule, shared } = workerData
// ms this thread spent making contexts and evaluating the prelude: active time on its event loop that is not a program's
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
// the module the host compiled once for the process: its compiled code is shared by every thread that instantiates it
const QuickJS = await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmMemory: memory, wasmModule }))
// the program's first line shares the wrapper's (QuickJS takes no line offset): its columns there are shifted back
const header = '(async function (tools, console) {'
const outOfMemory = /^InternalError: out of memory/
// the runtime's own limit a little under the memory's maximum: most bombs end as QuickJS's catchable out-of-memory
const limit = Math.max(8 << 20, memoryBytes - (8 << 20))
// what a run threw ran out of memory: QuickJS says so, or it threw null (when it cannot allocate even the error) once
// the module's memory grew to the runtime's limit (it never shrinks: a run after one that used that much, throwing
// null itself, is taken as one too)
const ranOut = (message) => outOfMemory.test(message) || (message === 'null' && memory.buffer.byteLength >= limit)
const location = /program\.js:(\d+):(\d+)/
let current

// what a step reported, posted once it is over; a line printed or a run ended goes at once, with what came before it
// (a program that goes on computing is ended from the host, and what it printed is in the outcome)
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
// a fresh runtime and context with the prelude evaluated in it (its `setup`, not called yet)
const fresh = () =>
  timed(() => {
    const runtime = QuickJS.newRuntime()
    runtime.setMemoryLimit(limit)
    runtime.setMaxStackSize(stackBytes)
    const vm = runtime.newContext()
    // what QuickJS-ng adds to the standard globals, which a V8 context does not have: a clock and a way to queue work
    vm.unwrapResult(vm.evalCode(nonStandard, 'faber-globals.js')).dispose()
    // the calls' script evaluated whole in the program's realm, before anything of the program: the prelude's `shared`
    const shared = vm.unwrapResult(vm.evalCode(calls, 'faber-calls.js'))
    return { runtime, vm, shared, setup: vm.unwrapResult(vm.evalCode(prelude, 'faber-prelude.js')) }
  })
// the next run's, made once the last run ended cleanly, while this thread waits: compiling the prelude is most of what a
// trivial run costs. no program has run in it
let next
const prepareNext = () => {
  if (next !== undefined || current !== undefined) return
  try {
    next = fresh()
  } catch {}
}

function run({ id, code, tools, outputBytes, bufferBytes, argumentBytes, maxPendingCalls }) {
  const { runtime, vm, shared, setup } = next ?? fresh()
  next = undefined
  // every handle the run holds, freed after a clean end (QuickJS asserts on a runtime freed with objects alive)
  const held = []
  const hold = (handle) => {
    held.push(handle)
    return handle
  }
  const state = { id, vm, runtime, held, reported: undefined, broken: false, deliver: undefined }
  current = state
  const value = (handle) => {
    const type = vm.typeof(handle)
    return type === 'string' ? vm.getString(handle) : type === 'number' ? vm.getNumber(handle) : undefined
  }
  // the program's only way out: primitives in, a boolean back. a call or a line goes at once; the end waits until the
  // program's jobs are done (drain)
  const crossing = vm.newFunction('crossing', (...handles) => {
    if (current !== state || state.reported || state.broken) return vm.false
    const [kind, a, b, c, d] = handles.map(value)
    if (kind === 'call' && typeof c === 'string' && c.length > argumentBytes) return stop(state, [id, 'memory', 'argument'])
    // a call with its site (`d`, line × 2^21 + column), a line, the clock readings and random numbers the program read
    if (kind === 'call' || kind === 'log' || kind === 'values') post([id, kind, a, b, c, kind === 'call' ? site(d) : d])
    else if (kind === 'done') state.reported = [id, kind, a]
    else if (kind === 'throw') state.reported = ranOut(a) ? [id, 'oom'] : [id, kind, ...shifted(a, b, c)]
    else if (kind === 'limit' || kind === 'memory') return stop(state, [id, kind, a])
    else return vm.false
    return vm.true
  })
  hold(crossing)
  hold(setup)
  hold(shared)
  try {
    const numbers = [outputBytes, bufferBytes, argumentBytes, maxPendingCalls].map((n) => hold(vm.newNumber(n)))
    const toolsJson = hold(vm.newString(JSON.stringify(tools)))
    const api = hold(timed(() => vm.unwrapResult(vm.callFunction(setup, vm.undefined, crossing, toolsJson, ...numbers, shared))))
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

// a call's site on the wrapper's line, as the program wrote it
const site = (at) => (typeof at === 'number' && at >= 2 ** 21 && at < 2 ** 22 ? at - header.length + 1 : at)

// a column on the wrapper's line, as the program wrote it
function shifted(message, line, column) {
  if (line !== 1 || typeof column !== 'number') return [message, line, column]
  // (QuickJS counts a column there one short after the wrapper: `null.x` right after it is reported at 34, not 35)
  const at = column - header.length + 1
  return [typeof message === 'string' ? message.replace(`(line 1, column ${column})`, `(line 1, column ${at})`) : message, line, at]
}

function stop(state, message) {
  state.broken = true
  post(message)
  return state.vm.false
}

// runs the program's jobs until none is left: what it reported then stands, and a clean run leaves nothing behind
function drain(state) {
  const jobs = state.runtime.executePendingJobs(-1)
  if (jobs.error) {
    const error = state.vm.dump(jobs.error)
    throw new Error(`${error?.name}: ${error?.message}`)
  }
  if (state.broken || !state.reported) return
  if (state.reported[1] === 'oom') return void stop(state, state.reported)
  current = undefined
  for (const handle of state.held) if (handle.alive) handle.dispose()
  state.vm.dispose()
  state.runtime.dispose()
  const [id, kind, a, b, c] = state.reported
  post([id, kind, a, b, c, memory.buffer.byteLength])
  setImmediate(prepareNext)
}

// QuickJS or its module failed under the program (an allocation, the module's own stack): the host ends this thread
function fault(state, error) {
  state.broken = true
  const full = memory.buffer.byteLength >= (pages - 16) * 65536
  post(full || outOfMemory.test(String(error?.message)) ? [state.id, 'oom'] : [state.id, 'crash', String(error?.message ?? error)])
}

// the replies that came, in a list: each handed in, then the program runs until it waits again
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
// a program with a tool call run here before the first: V8 compiles the module's functions as they are first called
// (and again, optimized, once they ran a while), which would otherwise land in the first programs' cpu time
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
