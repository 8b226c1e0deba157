// the calls a program has waiting on the host, and the common argument's JSON: evaluated whole, as a script whose value
// is `{ flatJson, makeCalls }`, in a context of the backend's own that no program reaches (once per worker or isolate, so
// V8 optimizes this code once, not again in every run's fresh context: ~7 ms of optimizing compiles a run, on a thread
// that competes with both spinning sides for the cores), or in the program's realm before the prelude (QuickJS, the vm
// test double). the prelude's `setup` takes what it answers. it binds the builtins it calls from the realm it is
// evaluated in; what it makes for the program comes of the Promise and parse of the program's realm, which the prelude
// hands it. strict, so that a frame of it shows a program no function or receiver (Error.prepareStackTrace)
;(() => {
  // biome-ignore lint/suspicious/noRedundantUseStrict: evaluated as a script, not as a module
  'use strict'
  const { keys, getPrototypeOf, getOwnPropertySymbols, getOwnPropertyDescriptor, defineProperty, hasOwn, freeze } = Object
  const { stringify } = JSON
  const isFiniteNumber = Number.isFinite
  const $floor = Math.floor
  const $min = Math.min

  // the common argument, a plain object of strings, finite numbers, booleans and nulls, without toJson's walk. anything
  // else — nesting, a getter (which may throw, or answer differently when read again), a Proxy whose trap throws, a value
  // JSON would change, more than `budget` characters — answers undefined, and the prelude's walk decides with its
  // message. `objectPrototype` is the program realm's, taken before the program ran
  const flatJson = (value, budget, objectPrototype) => {
    try {
      if (typeof value !== 'object' || value === null || getPrototypeOf(value) !== objectPrototype) return undefined
      if (getOwnPropertySymbols(value).length > 0) return undefined
      const names = keys(value)
      let text = '{'
      for (let i = 0; i < names.length; i++) {
        const name = names[i]
        const descriptor = getOwnPropertyDescriptor(value, name)
        if (descriptor === undefined || !hasOwn(descriptor, 'value')) return undefined
        const v = descriptor.value
        let part
        switch (typeof v) {
          case 'string':
            if (v.length > budget - text.length) return undefined
            part = stringify(v)
            break
          case 'number':
            if (!isFiniteNumber(v)) return undefined
            part = stringify(v)
            break
          case 'boolean':
            part = v ? 'true' : 'false'
            break
          default:
            if (v !== null) return undefined
            part = 'null'
        }
        if (name.length > budget - text.length) return undefined
        text += `${i ? ',' : ''}${stringify(name)}:${part}`
        if (text.length >= budget) return undefined
      }
      return `${text}}`
    } catch {
      return undefined
    }
  }

  // the calls waiting on the host, made once per run: `open(name, json, site)` sends a call made at `site` (siteOf's
  // number) and answers the promise of its reply (a promise of the program's realm, which `promiseFor(record)` makes,
  // putting its settling functions on `record`), or 1 when the call could not be sent; `deliver(id, ok, text, code)`
  // settles call `id` with the host's reply, parsed by the program realm's `parse`, or rejected with the program realm's
  // error that `failed(name, text, code, site)` makes. whatever it is handed and answers is a primitive or of the
  // program's realm.
  //
  // each call has a slot: a record of what settles it and its id (`seq` × maxPendingCalls + its slot, so a reply finds
  // its slot by a remainder, and one for a call already settled finds another id there). a slot is taken from `free`
  // and given back when its reply comes: no map, closure or record per call. the slots are made as calls need them,
  // 8 then doubling up to maxPendingCalls (filling all 1024 before every run cost its setup tens of µs), each index
  // defined, not assigned, and never removed: a write finds the index there, never a setter on Array.prototype, and a
  // record's fields are its own
  const makeCalls = (promiseFor, parse, failed, maxPendingCalls, crossing) => {
    const slots = []
    const free = []
    let made = 0
    let freeCount = 0
    // ids stay below 2^31: `seq` wraps, long after any reply to a slot's last id
    const generations = $floor(2 ** 31 / maxPendingCalls)
    const define = (list, index, value) => defineProperty(list, index, { __proto__: null, value, writable: true, enumerable: true, configurable: true })
    const makeSlots = () => {
      const more = $min(made === 0 ? 8 : made, maxPendingCalls - made)
      // `free` is as long as `slots`, so that every place of the stack is there before it is written
      for (let i = 0; i < more; i++) {
        define(slots, made, { id: -1, resolve: undefined, reject: undefined, name: '', site: 0 })
        define(free, made, -1)
        made++
      }
      for (let i = 1; i <= more; i++) free[freeCount++] = made - i
    }
    let seq = 0
    const release = (slot) => {
      const record = slots[slot]
      record.id = -1
      record.resolve = undefined
      record.reject = undefined
      record.name = ''
      record.site = 0
      free[freeCount++] = slot
    }
    // calls beyond maxPendingCalls wait here, in order, as records of their own (`next` links them: no list a setter on
    // Array.prototype could see), and are sent as earlier calls settle: a fan-out of any size sees no refusal, and the
    // host never holds more than maxPendingCalls of them. the program's own memory and cpu budgets bound what waits
    let first
    let last
    const send = (slot, record, name, json, site) => {
      if (++seq === generations) seq = 1
      const id = seq * maxPendingCalls + slot
      record.id = id
      record.name = name
      record.site = site
      let sent = false
      try {
        sent = crossing('call', id, name, json, site) !== false
      } catch {}
      if (!sent) release(slot)
      return sent
    }
    const open = (name, json, site) => {
      if (freeCount === 0 && made < maxPendingCalls) makeSlots()
      if (freeCount === 0) {
        const held = { name, json, site, resolve: undefined, reject: undefined, next: undefined }
        const reply = promiseFor(held)
        if (last === undefined) first = held
        else last.next = held
        last = held
        return reply
      }
      const slot = free[freeCount - 1]
      const record = slots[slot]
      // the promise first: a stack overflow while it is made leaves no slot taken (a free record's settling functions are
      // never called: no reply finds its id)
      const reply = promiseFor(record)
      freeCount--
      return send(slot, record, name, json, site) ? reply : 1
    }
    // a slot came free: the calls held longest go out
    const sendHeld = () => {
      while (first !== undefined && freeCount > 0) {
        const held = first
        first = held.next
        if (first === undefined) last = undefined
        const slot = free[--freeCount]
        const record = slots[slot]
        record.resolve = held.resolve
        record.reject = held.reject
        if (!send(slot, record, held.name, held.json, held.site)) held.reject(failed(held.name, 'the call could not be sent to the host', undefined, held.site))
      }
    }
    const deliver = (id, ok, text, code) => {
      if (typeof id !== 'number') return
      const slot = id % maxPendingCalls
      if (!(slot >= 0 && slot < made) || slots[slot].id !== id) return
      const record = slots[slot]
      const resolve = record.resolve
      const reject = record.reject
      const name = record.name
      const site = record.site
      release(slot)
      if (first !== undefined) sendHeld()
      if (!ok) return reject(failed(name, `${text}`, code === undefined ? undefined : `${code}`, site))
      let value
      try {
        value = parse(text)
      } catch {
        return reject(failed(name, 'the host replied with text that is not JSON', undefined, site))
      }
      resolve(value)
    }
    return { __proto__: null, open, deliver }
  }

  return freeze({ __proto__: null, flatJson, makeCalls })
})()
