// the worker's entry: plain js, because a .ts worker entry does not load under tsx on node 20.
// it runs one program at a time, each in a fresh vm context, and talks to the host in strings and numbers.
import v8 from 'node:v8'
import vm from 'node:vm'
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads'

const preludeScript = new vm.Script(workerData.prelude, { filename: 'faber-prelude.js' })
let current

// a run talks to the host over a port pair of its own. replies arrive as port messages through the event loop, and the
// worker may also take them synchronously: after posting a call, while replies came back quickly lately, it spins a
// moment on `seq[0]` (the host bumps it after each reply it posts) before going back to its event loop to sleep. it bumps
// `seq[1]` after each message it posts, for a host that spins the same way after a reply. `waited` tells the host how
// much of this thread's active time was spent spinning, which is not the program's
const { replies, toHost, handoff, spinMs: maxSpinMs } = workerData
const seq = new Int32Array(handoff, 0, 2)
const waited = new Float64Array(handoff, 8, 1)
// a spin lasts about twice what replies took lately, and does not happen once they take longer than `maxSpinMs`
let recentMs = 0
let calledAt = 0
let scheduled = false
// a spin that caught no reply makes the next hand-offs sleep at once: 1, 3, 7 … 255 of them after 1, 2, 3 … 8 misses in a
// row. on a busy machine the host is often not running while this thread spins, and then spinning only takes its core
let misses = 0
let skip = 0

// a rejection the program left unhandled belongs to the program, not to the worker
process.on('unhandledRejection', () => {})

const post = (message) => {
  toHost.postMessage(message)
  Atomics.add(seq, 1, 1)
}

// what the host reads to decide whether this worker may serve another run
const heapUsed = () => v8.getHeapStatistics().used_heap_size

function runProgram({ id, source, tools, outputBytes, bufferBytes, argumentBytes, maxPendingCalls }) {
  const run = { id, finished: false, deliver: undefined, outstanding: 0 }
  current = run
  const finish = (message) => {
    run.finished = true
    // posted once the microtask queue is empty: a program still computing after its return never reports done
    setImmediate(() => {
      if (current === run) current = undefined
      post({ ...message, heap: heapUsed() })
    })
  }
  // the program's only way out; it sees nothing but what it returns (booleans), and it checks every argument
  const bridge = (kind, a, b, c) => {
    if (current !== run || run.finished) return false
    switch (kind) {
      case 'call':
        if (typeof a !== 'number' || typeof b !== 'string' || typeof c !== 'string') return false
        // the prelude checks the size first; this is the copy the program cannot talk its way past
        if (c.length > argumentBytes) {
          run.finished = true
          post({ t: 'memory', id, reason: 'argument' })
          return false
        }
        // a string, which crosses a port for less than an object: `id:call:name length:name json`
        post(`${id}:${a}:${b.length}:${b}${c}`)
        run.outstanding++
        calledAt = performance.now()
        spinForReplies()
        return true
      case 'log':
        if (typeof a !== 'string') return false
        post({ t: 'log', id, line: a })
        return true
      case 'done':
        finish({ t: 'done', id, result: typeof a === 'string' ? a : undefined })
        return true
      case 'throw':
        finish({
          t: 'throw',
          id,
          message: typeof a === 'string' ? a : 'the program threw',
          line: typeof b === 'number' ? b : undefined,
          column: typeof c === 'number' ? c : undefined,
        })
        return true
      case 'limit':
      case 'memory':
        run.finished = true
        post({ t: kind, id, reason: a === 'argument' ? 'argument' : 'buffers' })
        return true
    }
    return false
  }

  const context = vm.createContext(Object.create(null), {
    name: 'faber-program',
    codeGeneration: { strings: true, wasm: false },
  })
  const api = preludeScript.runInContext(context)(bridge, JSON.stringify(tools), outputBytes, bufferBytes, argumentBytes, maxPendingCalls, source)
  const { start, deliver, refuseImport } = api
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
    finish({ t: 'throw', id, message: `${error?.name}: ${error?.message}${line ? ` (line ${line})` : ''}`, line, column })
    return
  }
  start(main)
}

// runs once the program's microtasks are done (an immediate) when it has calls waiting on the host: replies already
// there are taken, else a spin of about twice what replies took lately, then whatever came
function spinForReplies() {
  if (scheduled || !(recentMs < maxSpinMs)) return
  if (skip > 0) return void skip--
  scheduled = true
  setImmediate(() => {
    scheduled = false
    const run = current
    if (run === undefined || run.finished || run.outstanding <= 0) return
    const mark = Atomics.load(seq, 0)
    if (takeReplies()) return
    const budget = Math.min(maxSpinMs, 2 * recentMs + 0.01)
    const started = performance.now()
    let now = started
    while (Atomics.load(seq, 0) === mark && (now = performance.now()) - started < budget) {}
    waited[0] += now - started
    if (Atomics.load(seq, 0) !== mark) misses = 0
    else skip = (1 << (misses = Math.min(misses + 1, 8))) - 1
    takeReplies()
  })
}

function takeReplies() {
  let taken = false
  for (let message = receiveMessageOnPort(replies); message !== undefined; message = receiveMessageOnPort(replies)) taken = reply(message.message) || taken
  return taken
}

// a reply that succeeded comes as the string `id:call:text`, a failure as { id, call, text, code }
function reply(message) {
  recentMs = recentMs * 0.75 + (performance.now() - calledAt) * 0.25
  const run = current
  if (run === undefined || run.finished) return false
  let call
  let text
  let code
  const ok = typeof message === 'string'
  if (ok) {
    const first = message.indexOf(':')
    const second = message.indexOf(':', first + 1)
    if (+message.slice(0, first) !== run.id) return false
    call = +message.slice(first + 1, second)
    text = message.slice(second + 1)
  } else {
    if (message.id !== run.id) return false
    ;({ call, text, code } = message)
  }
  run.outstanding--
  // a plain call: a method call would make `run` the receiver, which a program can read off a stack frame
  const { deliver } = run
  try {
    deliver(call, ok, text, code)
  } catch {}
  return true
}

parentPort.on('message', (message) => {
  if (message.t === 'run') runProgram(message)
})
replies.on('message', reply)
parentPort.postMessage({ t: 'ready' })
