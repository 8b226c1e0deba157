// the entry of a sandbox process, plain js on plain node: it serves one backend's driver (contract.ts) over the ipc
// channel (the messages each way: process-sandbox.ts). what a program reports goes back as the contract's report tuples
// `[run, kind, a, b, c, d]`, which the host checks with the one `report()`. it holds no secrets and writes nothing of its own.

let driver
const units = new Map()
const runs = new Map()

// what this process sends in one turn goes as one message, a list of them: a message costs each side 20-35 us
let outbox = []
const flush = () => {
  const list = outbox
  outbox = []
  if (list.length > 0) process.send?.(list.length === 1 ? list[0] : list)
}
const send = (message) => {
  if (outbox.push(message) === 1) process.nextTick(flush)
}
// what a thrown value says, never throwing in turn: a backend may throw a value with no prototype
const textOf = (error) => {
  try {
    return error instanceof Error ? error.message : String(error)
  } catch {
    return 'an error that could not be shown'
  }
}

async function init(module, exportName, options) {
  try {
    // a backend written in TypeScript (one loaded from a workspace's sources) needs a loader; a built one does not
    if (module.endsWith('.ts')) (await import('tsx/esm/api')).register()
    const made = (await import(module))[exportName]
    driver = typeof made === 'function' ? new made(options) : made
    send(['ready'])
  } catch (error) {
    send(['failed', textOf(error)])
  }
}

async function create(id, memoryMb) {
  try {
    const unit = await driver.create(memoryMb, () => {
      if (units.delete(id)) send(['lost', id])
    })
    units.set(id, unit)
    send(['made', id])
  } catch (error) {
    send(['unmade', id, `${driver.createFailure}: ${textOf(error)}`])
  }
}

function start(unitId, id, { code, source, tools, limits, replay }) {
  const unit = units.get(unitId)
  let ended = false
  const tell = (kind, a, b, c, d) => {
    if (!ended) send([id, kind, a, b, c, d])
  }
  // told once, after the word that this process should be replaced (a thread parked by an out-of-memory holds memory for
  // good), so that the host does not take the unit back
  const end = (kind, a, b, c, d) => {
    if (ended) return
    if (driver.parked > 0) send(['retire'])
    tell(kind, a, b, c, d)
    ended = true
  }
  // the arguments of calls not answered yet: what the host's bridge would refuse past memoryMb ('waiting') is refused
  // here, before it is copied to the host. (an argument over a quarter of memoryMb goes on: the host refuses it as such)
  const budget = limits.memoryMb * 1024 * 1024
  const unanswered = new Map()
  let waitingBytes = 0
  const reports = {
    ended: () => ended,
    call: (call, name, json, site) => {
      if (typeof json === 'string' && json.length <= budget / 4) {
        waitingBytes += json.length
        unanswered.set(call, json.length)
        if (waitingBytes > budget) return reports.refused('waiting')
      }
      tell('call', call, name, json, site)
    },
    log: (line) => {
      tell('log', line)
      return !ended
    },
    done: (result, heap) => end('done', result, undefined, undefined, heap),
    threw: (message, line, column, heap) => end('throw', message, line, column, heap),
    overOutput: () => end('limit'),
    refused: (reason) => end('memory', reason),
    failed: (kind, message) => end('failed', kind, message),
    values: (values) => tell('values', JSON.stringify(values)),
  }
  // what of its request a driver reads (the tool calls go through the host's bridge)
  const request = { code, tools, ...(Array.isArray(replay) ? { values: { replay, record: reports.values } } : {}) }
  const program = { request, limits, source }
  const run = {
    handle: undefined,
    end: () => (ended = true),
    answered(call) {
      waitingBytes -= unanswered.get(call) ?? 0
      unanswered.delete(call)
    },
  }
  runs.set(id, run)
  if (!unit) return reports.failed('crash', 'the sandbox process has no such unit')
  try {
    run.handle = driver.start(unit, program, reports)
  } catch (error) {
    reports.failed('crash', textOf(error))
  }
}

process.on('message', (message) => {
  if (!Array.isArray(message)) return
  if (!Array.isArray(message[0])) return handle(message)
  for (const each of message) if (Array.isArray(each)) handle(each)
})

function handle([kind, a, b, c]) {
  switch (kind) {
    case 'init':
      return void init(a, b, c)
    case 'create':
      return void create(a, b)
    case 'start':
      return start(a, b, c)
    case 'reply': {
      const run = runs.get(a)
      run?.answered(b)
      return run?.handle?.deliver(b, c)
    }
    case 'cpu': {
      let used
      try {
        used = runs.get(a)?.handle?.cpuUsed()
      } catch {}
      return void send(['cpu', a, typeof used === 'number' ? used : null])
    }
    case 'end': {
      const run = runs.get(a)
      runs.delete(a)
      run?.end()
      return run?.handle?.end(b === true)
    }
    case 'dispose': {
      const unit = units.get(a)
      units.delete(a)
      if (unit) void Promise.resolve(driver.dispose(unit)).catch(() => {})
      return void send(['disposed', a])
    }
  }
}
// the host is gone: nothing here may outlive it
process.on('disconnect', () => process.exit(0))
