// the calls a program has waiting on the host, and the common argument's JSON: a script whose value, `{ flatJson,
// makeCalls }`, is the prelude's `shared`. evaluated once per worker or isolate in a context of its own that no program
// reaches, so V8 optimizes it once, not in every run's fresh context (~7 ms of optimizing compiles a run), or in the
// program's realm before the prelude (QuickJS, the vm double). what it makes for the program comes of the program realm's
// Promise and parse. strict, so that a frame of it shows a program no function or receiver (Error.prepareStackTrace)
;(() => {
  // biome-ignore lint/suspicious/noRedundantUseStrict: evaluated as a script, not as a module
  'use strict'
  const { keys, getPrototypeOf, getOwnPropertySymbols, getOwnPropertyDescriptor, defineProperty, hasOwn, freeze } = Object
  const { stringify } = JSON
  const isFiniteNumber = Number.isFinite
  const $floor = Math.floor
  const $min = Math.min

  // a plain object of strings, finite numbers, booleans and nulls, without toJson's walk. anything else (nesting, a
  // getter, a Proxy whose trap throws, more than `budget` characters) answers undefined: the prelude's walk decides.
  // `objectPrototype` is the program realm's, taken before the program ran
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

  // made once per run: `open(name, json, site)` sends a call and answers the promise of its reply (which `promiseFor(record)`
  // makes, putting its settling functions on `record`), or 1 when it could not be sent; `deliver(id, ok, text, code)`
  // settles call `id`, with the reply `parse`d or rejected with `failed(name, text, code, site)`. all of the program's realm.
  // each call has a slot: its id (`seq` × maxPendingCalls + slot: a reply finds its slot by a remainder, and a stale one
  // another id there) and what settles it, taken from `free` and given back with the reply, no record per call. slots
  // are made as calls need them, 8 then doubling (making 1024 for every run cost tens of µs), each index defined and never
  // removed: a write never meets a setter on Array.prototype
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
      free[freeCount++] = slot
    }
    // calls beyond maxPendingCalls wait here in order, linked by `next` (no list a setter on Array.prototype sees), and go
    // as earlier ones settle: a fan-out of any size sees no refusal, bounded by the program's own memory and cpu budgets
    let first
    let last
    const send = (slot, record, name, json, site) => {
      if (++seq === generations) seq = 1
      const id = seq * maxPendingCalls + slot
      record.id = id
      record.name = name
      record.site = site
      let sent = false
      // (a crossing that cannot answer, an ignored isolated-vm callback, answers undefined: sent)
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
      // the promise first: a stack overflow while it is made leaves no slot taken
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
      const { resolve, reject, name, site } = slots[slot]
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
