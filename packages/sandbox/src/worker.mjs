// the worker's entry (plain js: a .ts worker entry does not load under tsx on node 20). it runs one program at a time,
// each in a fresh vm context, and talks to the host in strings and numbers
import v8 from 'node:v8'
import vm from 'node:vm'
import { parentPort, workerData } from 'node:worker_threads'
import { backoff, handoffWaited, lane } from './lane.mjs'

const preludeScript = new vm.Script(workerData.prelude, { filename: 'faber-prelude.js' })
let current

// calls-script.js, once per worker in a context of its own that no program reaches (never this worker's realm, which
// has `process`): V8 optimizes it once, not in every run's fresh context
const driver = vm.createContext(Object.create(null), { name: 'faber-worker-driver', codeGeneration: { strings: false, wasm: false } })
const shared = vm.runInContext(workerData.calls, driver, { filename: 'faber-calls.js' })

// a run talks to the host over two lanes, one each way (lane.mjs). after posting a call this thread spins for the reply
// (at most `spinMs`, unless more than one run is going on in the process: `active`) before it sleeps; `waited` tells
// the host how much of its active time was spinning, which is not the program's
const { replies, toHost, handoff, active, spinMs } = workerData
const waited = new Float64Array(handoff, handoffWaited, 1)
const calls = lane(handoff, 0, toHost)
const answers = lane(handoff, 1, replies)
// a spin that caught nothing makes both sides sleep for a while: on a busy machine it only takes a core
const pair = backoff(handoff, 0)
let scheduled = false

// a rejection the program left unhandled belongs to the program, not to the worker
process.on('unhandledRejection', () => {})

// the calls a stretch of the program made go together at its next tick (a message costs each side ~10 µs); one call
// alone goes as itself, by the ring when the host spins for it. anything else posted goes after the calls before it
let batch = []
const flushCalls = () => {
  if (batch.length === 0) return
  const list = batch
  batch = []
  calls.send(list.length === 1 ? list[0] : list)
}
const post = (message) => {
  flushCalls()
  calls.send(message)
}

// a run's fresh context with the prelude evaluated in it (its `setup`, not yet called)
const freshContext = () => {
  const context = vm.createContext(Object.create(null), {
    name: 'faber-program',
    codeGeneration: { strings: true, wasm: false },
  })
  return { context, setup: preludeScript.runInContext(context) }
}
// the next run's, made while this thread waits after a run (~1 ms at the start of every run). no program ran in it
let next
const prepareNext = () => {
  if (next !== undefined || current !== undefined) return
  try {
    next = freshContext()
  } catch {}
}

function runProgram({ id, source, tools, outputBytes, bufferBytes, argumentBytes, maxPendingCalls, recorded }) {
  const run = { id, finished: false, deliver: undefined, outstanding: 0, broken: false }
  current = run
  const finish = (message) => {
    run.finished = true
    // posted once the microtask queue is empty: a program still computing after its return never reports done
    setImmediate(() => {
      if (current === run) current = undefined
      // the heap tells the host whether this worker may serve another run; with none it replaces it (see `bridge`)
      message[5] = run.broken ? undefined : v8.getHeapStatistics().used_heap_size
      post(message)
      // a run already waiting goes first (it makes its own); one that cannot be made now is the next run's to report
      if (!run.broken) setImmediate(prepareNext)
    })
  }
  // the program's only way out, answering booleans; it passes on primitives only, as the host's report takes them:
  // `[run id, kind, a, b, c, heap]`, a call as a string. a stack overflow inside (a program may enter with its stack all
  // but used up) may leave this worker's state half changed and hang a later run: the run goes on refused, and the
  // worker serves no other
  const bridge = (kind, a, b, c, d) => {
    try {
      return cross(kind, a, b, c, d)
    } catch {
      run.broken = true
      return false
    }
  }
  const primitive = (value) => (typeof value === 'string' || typeof value === 'number' ? value : undefined)
  const cross = (kind, a, b, c, d) => {
    if (current !== run || run.finished) return false
    if (kind === 'call') {
      if (typeof a !== 'number' || typeof b !== 'string' || typeof c !== 'string') return false
      // a string, which crosses a port for less than an object: `id:call:site:name length:name json`
      if (batch.push(`${id}:${a}:${typeof d === 'number' ? d : 0}:${b.length}:${b}${c}`) === 1) process.nextTick(flushCalls)
      run.outstanding++
      pair.called()
      spinForReplies()
      return true
    }
    const message = [id, kind, primitive(a), primitive(b), primitive(c)]
    if (kind === 'done' || kind === 'throw') finish(message)
    else if (kind === 'log' || kind === 'values') post(message)
    else if (kind === 'limit' || kind === 'memory') return stop(message)
    else return false
    return true
  }
  // the run ends here (the prelude reads no answer to these)
  const stop = (message) => {
    run.finished = true
    post(message)
    return false
  }

  const { context, setup } = next ?? freshContext()
  next = undefined
  const { start, deliver, refuseImport } = setup(bridge, JSON.stringify(tools), outputBytes, bufferBytes, argumentBytes, maxPendingCalls, shared, recorded)
  run.deliver = deliver

  let main
  try {
    const script = new vm.Script(source, {
      filename: 'program.js',
      lineOffset: -1,
      // without this callback node answers import() with an error from the worker's realm: a way out
      importModuleDynamically: () => {
        throw refuseImport()
      },
    })
    main = script.runInContext(context)
  } catch (error) {
    const match = /program\.js:(\d+)(?::(\d+))?/.exec(String(error?.stack))
    const line = match ? Number(match[1]) : undefined
    const column = match?.[2] ? Number(match[2]) : undefined
    finish([id, 'throw', `${error?.name}: ${error?.message}${line ? ` (line ${line})` : ''}`, line, column])
    return
  }
  start(main)
}

// once the program's microtasks are done, with one call waiting: a reply already there is taken, else a spin of at most
// `spinMs`. a tick (an immediate's poll of the loop's handles cost 13–50 µs at load 8 against 0.8 µs), queued from a
// microtask: node runs it once the microtask queue is empty, wherever the call was made (a tick queued outside one, as
// the program starts, would run before the microtasks)
function spinForReplies() {
  if (scheduled || !(spinMs > 0) || Atomics.load(active, 0) > 1 || !pair.may(0)) return
  scheduled = true
  answers.watch()
  settledPromise.then(afterMicrotasks)
}

const settledPromise = Promise.resolve()
const afterMicrotasks = () => process.nextTick(spinNow)

function spinNow() {
  scheduled = false
  const run = current
  // a spin is for a call made alone (a sequential program); replies to many come through the event loop as they come
  if (run === undefined || run.finished || run.outstanding !== 1 || answers.take(reply) > 0) {
    if (answers.unwatch()) answers.take(reply)
    return
  }
  const started = performance.now()
  const caught = answers.spin(spinMs)
  waited[0] += performance.now() - started
  pair.spun(caught)
  answers.take(reply)
}

// a reply that succeeded comes as `id:call:text`, a failure as { id, call, text, code }, several as a list of them
function reply(message) {
  if (Array.isArray(message)) {
    for (let i = 0; i < message.length; i++) reply(message[i])
    return
  }
  const run = current
  if (run === undefined || run.finished) return
  let call
  let text
  let code
  const ok = typeof message === 'string'
  if (ok) {
    const first = message.indexOf(':')
    const second = message.indexOf(':', first + 1)
    if (+message.slice(0, first) !== run.id) return
    call = +message.slice(first + 1, second)
    text = message.slice(second + 1)
  } else {
    if (message.id !== run.id) return
    ;({ call, text, code } = message)
  }
  run.outstanding--
  // a plain call: a method call would make `run` the receiver, which a program can read off a stack frame
  const { deliver } = run
  try {
    deliver(call, ok, text, code)
  } catch {}
}

parentPort.on('message', runProgram)
replies.on('message', (message) => answers.port(message, reply))
parentPort.postMessage({ t: 'ready' })
