// the driver: made once per isolate, in a context of its own that no program reaches, with calls-script.js's answer
// evaluated there (`shared`), and called for each run with the prelude's `setup` of that run's context. its closures
// are made per run, but their code is the isolate's: V8 optimizes it once, not again in every run's fresh context (there it was ~40% of the optimizing compiles of a run of 2,000 calls, on
// a thread that competes with both spinning sides for the cores). its intrinsics are that context's, which no program
// can replace; it is strict, so that a frame of it shows a program no function or receiver (Error.prepareStackTrace).
// nothing of its realm reaches the program: it hands the prelude only primitives, and the prelude turns whatever its
// bridge throws (a stack overflow raised as it is entered is an error of this realm) into a refusal.
//
// on the isolate's own thread (the first stretch; every stretch unless the sandbox drives from its thread) the bridge is
// an ignored callback, or the hand-off's ring. once a reply was `deliver`ed synchronously from the sandbox's thread, that
// thread drives the program, and its bridge is a plain callback to this thread.
//
// the hand-off (lane-script.js, evaluated here as in node; no Buffer or TextEncoder in an isolate: strings go in and out
// as utf-16 units): while the host spins for the program's next call (its lane's AWAKE), a call goes through lane 0's
// ring, else through `offHost`, which wakes the host's event loop. after a call made while no other is waiting, this
// thread spins for the reply once the program's synchronous part is done (in a microtask: an isolate has no
// setImmediate), at most `spinLoops` turns; a reply that comes meanwhile through lane 1's ring is delivered there, and
// the program goes on in the same task without a wake-up. otherwise replies come by `post`, a task of this thread
// biome-ignore lint/suspicious/noRedundantUseStrict: evaluated as a script, not as a module
'use strict'
  // the script's value: (shared, lanes) => the driver
;(shared, lanes) =>
  (onHost, offHost, handoff, active, spinLoops, setup, recordedJson, toolNamesJson, ...rest) => {
    const charCodeAt = Function.prototype.call.bind(String.prototype.charCodeAt)
    const indexOf = Function.prototype.call.bind(String.prototype.indexOf)
    const slice = Function.prototype.call.bind(String.prototype.slice)
    const fromCharCode = String.fromCharCode
    const now = Date.now
    let host = false

    // the hand-off's two lanes and the pair's back-off (lane-script.js, evaluated in this context: `lanes`). lane 0
    // carries the program's calls and reports: what does not take its ring is the callback's (0 is a doorbell). lane 1
    // brings the host's replies, through its ring or as tasks of this thread (`post`)
    const codec = {
      write: (units, at, text) => {
        for (let i = 0; i < text.length; i++) units[at + i] = charCodeAt(text, i)
      },
      read: (units, at, length) => {
        let text = ''
        const end = at + length
        for (; at + 8 <= end; at += 8)
          text += fromCharCode(units[at], units[at + 1], units[at + 2], units[at + 3], units[at + 4], units[at + 5], units[at + 6], units[at + 7])
        for (; at < end; at++) text += fromCharCode(units[at])
        return text
      },
    }
    const none = () => undefined
    const toHost = { postMessage: (m) => (m === 0 ? offHost(0) : offHost(m[0], m[1], m[2], m[3], m[4])) }
    const calls = lanes.lane(handoff, 0, toHost, none, none, codec)
    const replies = lanes.lane(handoff, 1, { postMessage: none }, none, none, codec)
    const pair = lanes.backoff(handoff, 0)
    const maxText = lanes.layout.maxUnits - 2
    const runs = new Int32Array(active)
    let outstanding = 0
    let scheduled = false
    let finished = false

    // a call as `id:site:name length:name json`, into lane 0's ring when the host spins and nothing sent otherwise waits
    const put = (id, name, json, site) =>
      json.length + name.length + 42 <= maxText && calls.open() && calls.offer(`${id}:${typeof site === 'number' ? site : 0}:${name.length}:${name}${json}`)
    const send = (kind, a, b, c, d) => calls.send([kind, a, b, c, d])

    // a reply that succeeded, as `id:text`; one that failed, as the list `post` was given
    const reply = (message) => {
      outstanding--
      if (typeof message !== 'string') return deliver(message[0], message[1], message[2], message[3])
      const colon = indexOf(message, ':')
      try {
        deliver(+slice(message, 0, colon), true, slice(message, colon + 1))
      } catch {}
    }
    const takeReplies = () => replies.take(reply)
    const spun = (caught) => {
      replies.spun(caught)
      pair.spun(caught)
    }
    const spin = async () => {
      await undefined
      scheduled = false
      if (finished || outstanding !== 1 || takeReplies() > 0) {
        if (replies.unwatch()) takeReplies()
        return
      }
      const started = now()
      for (let n = spinLoops; n > 0 && !replies.pending(); n--) {
        // a bound by the clock too, should a turn take far longer than the host measured (code not optimized yet, a loaded
        // machine): once the clock's millisecond changed, at most 1 ms on, so a spin never runs longer than a missed one is
        // credited at spinMs 1 (its largest). checked every 256 turns, a few µs when turns are slow. (a bound of `> 1`
        // checked every 4096 turns let spins run 2-2.5 ms against 1 credited: 200 calls to a host busy 1 ms each, spinMs 1,
        // were charged ~1 ms a call, past a 150 ms cpu budget)
        if ((n & 255) === 0 && now() !== started) break
      }
      replies.unwatch()
      // caught only if the ring brought it: a posted reply is a task of this thread, run once this one ends
      spun(takeReplies() > 0)
    }
    // whether to spin for the reply to a call about to be made: it will be the only one waiting (a sequential program),
    // and the back-off allows. the host replies as soon as its tool does, at once when it spun for the call (the ring took
    // it), else once the callback woke it (measured at load 1: spinning after those too, 29-40 µs a call against 53)
    const spinning = () => !scheduled && outstanding === 0 && spinLoops > 0 && Atomics.load(runs, 0) <= 1 && pair.may(1)
    const call = (a, b, c, d) => {
      const spins = spinning()
      // marked before the host can see the call: its reply takes the ring
      if (spins) replies.watch()
      const answer = put(a, b, c, d) || send('call', a, b, c, d)
      outstanding++
      pair.called()
      if (spins) {
        scheduled = true
        spin()
      }
      return answer
    }

    let ended
    const end = new Promise((resolve) => {
      ended = resolve
    })
    const crossing = (kind, a, b, c, d) => {
      let answer
      if (host) answer = onHost(kind, a, b, c, d)
      else if (kind === 'call' && typeof a === 'number' && typeof b === 'string' && typeof c === 'string') answer = call(a, b, c, d)
      else answer = send(kind, a, b, c)
      if (kind === 'done' || kind === 'throw') {
        finished = true
        ended()
      }
      return answer
    }
    const { start, deliver } = setup(crossing, toolNamesJson, ...rest, shared, recordedJson)
    return {
      start: (main) => void start(main),
      begin: (main) => {
        start(main)
        return end
      },
      ended: () => end,
      deliver: (call, ok, text, code) => {
        host = true
        deliver(call, ok, text, code)
      },
      // a reply the host posted (lane 1's port): what its ring holds came first. 0 is a doorbell for the ring
      post: (call, ok, text, code) => replies.port(call === 0 || typeof call === 'string' ? call : [call, ok, text, code], reply),
    }
  }
