// the worker's entry: plain js, because a .ts worker entry does not load under tsx on node 20.
// it runs one program at a time, each in a fresh vm context, and talks to the host in strings and numbers.
import v8 from 'node:v8'
import vm from 'node:vm'
import { parentPort, workerData } from 'node:worker_threads'

const preludeScript = new vm.Script(workerData.prelude, { filename: 'faber-prelude.js' })
let current

// a rejection the program left unhandled belongs to the program, not to the worker
process.on('unhandledRejection', () => {})

const post = (message) => parentPort.postMessage(message)

// what the host reads to decide whether this worker may serve another run
const heapUsed = () => v8.getHeapStatistics().used_heap_size

function runProgram({ id, source, tools, outputBytes, bufferBytes, argumentBytes, maxPendingCalls }) {
  const run = { id, finished: false, deliver: undefined }
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
        post({ t: 'call', id, call: a, name: b, json: c })
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
  const api = preludeScript.runInContext(context)(bridge, JSON.stringify(tools), outputBytes, bufferBytes, argumentBytes, maxPendingCalls)
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

function reply({ id, call, ok, text, code }) {
  const run = current
  if (run === undefined || run.id !== id || run.finished) return
  // a plain call: a method call would make `run` the receiver, which a program can read off a stack frame
  const { deliver } = run
  try {
    deliver(call, ok, text, code)
  } catch {}
}

parentPort.on('message', (message) => {
  if (message.t === 'run') runProgram(message)
  else if (message.t === 'reply') reply(message)
})
post({ t: 'ready' })
