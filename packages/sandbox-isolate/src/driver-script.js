// the driver: made once per isolate in a context of its own that no program reaches (calls-script.js's value there is
// `shared`), and called for each run with the prelude's `setup` of that run's context. its code is the isolate's, so V8
// optimizes it once, not in every run's fresh context (~40% of the optimizing compiles of a run of 2,000 calls). its
// intrinsics are that context's, which no program can replace; it is strict, so a frame of it shows a program no
// function or receiver. nothing of its realm reaches the program: it hands the prelude only primitives, and the prelude
// turns what its bridge throws into a refusal.
//
// the program runs on the isolate's thread from start to end; its bridge out is an ignored callback, or the hand-off's ring.
//
// the hand-off (lane-script.js; no Buffer in an isolate: strings cross as utf-16 units): while the host spins for the
// next call, a call goes through lane 0's ring, else through `offHost`. after a call made alone, this thread spins for
// the reply in a microtask, at most `spinLoops` turns; a reply through lane 1's ring then goes on in the same task.
// otherwise replies come by `post`, a task of this thread
// biome-ignore lint/suspicious/noRedundantUseStrict: evaluated as a script, not as a module
'use strict'
  // the script's value: (shared, lanes) => the driver
;(shared, lanes) =>
  (offHost, handoff, active, spinLoops, setup, recordedJson, toolNamesJson, ...rest) => {
    const fromCharCode = String.fromCharCode
    const now = Date.now

    const codec = {
      write: (units, at, text) => {
        for (let i = 0; i < text.length; i++) units[at + i] = text.charCodeAt(i)
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
    // lane 0 carries the program's calls and reports (what does not take its ring is the callback's; 0 is a doorbell),
    // lane 1 the host's replies
    const toHost = { postMessage: (m) => (m === 0 ? offHost(0) : offHost(m[0], m[1], m[2], m[3], m[4])) }
    const calls = lanes.lane(handoff, 0, toHost, none, none, codec)
    const replies = lanes.lane(handoff, 1, { postMessage: none }, none, none, codec)
    const pair = lanes.backoff(handoff, 0)
    const maxText = lanes.layout.maxUnits - 2
    const runs = new Int32Array(active)
    let outstanding = 0
    let scheduled = false
    let finished = false

    // `id:site:name length:name json`, into lane 0's ring when the host spins and nothing sent otherwise waits
    const put = (id, name, json, site) =>
      json.length + name.length + 42 <= maxText && calls.open() && calls.offer(`${id}:${typeof site === 'number' ? site : 0}:${name.length}:${name}${json}`)
    const send = (kind, a, b, c, d) => calls.send([kind, a, b, c, d])

    // a reply that succeeded is `id:text`; one that failed, the list `post` was given
    const reply = (message) => {
      outstanding--
      if (typeof message !== 'string') return deliver(message[0], message[1], message[2], message[3])
      const colon = message.indexOf(':')
      try {
        deliver(+message.slice(0, colon), true, message.slice(colon + 1))
      } catch {}
    }
    const takeReplies = () => replies.take(reply)
    const spin = async () => {
      await undefined
      scheduled = false
      if (finished || outstanding !== 1 || takeReplies() > 0) {
        if (replies.unwatch()) takeReplies()
        return
      }
      const started = now()
      for (let n = spinLoops; n > 0 && !replies.pending(); n--) {
        // bounded by the clock too, should turns be slower than the host measured: once its millisecond changed, so a
        // spin never runs longer than a missed one is credited at spinMs 1 (a bound of `> 1` checked every 4096 turns let
        // spins run 2-2.5 ms, charging 200 calls past a 150 ms cpu budget)
        if ((n & 255) === 0 && now() !== started) break
      }
      replies.unwatch()
      // caught only if the ring brought it: a posted reply is a task run once this one ends
      const caught = takeReplies() > 0
      replies.spun(caught)
      pair.spun(caught)
    }
    // spin for the reply to a call that will be the only one waiting, if the back-off allows (also after a call that
    // woke the host: 29-40 µs a call against 53 at load 1)
    const call = (a, b, c, d) => {
      const spins = !scheduled && outstanding === 0 && spinLoops > 0 && Atomics.load(runs, 0) <= 1 && pair.may(1)
      // marked before the host can see the call, so its reply takes the ring
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
      const answer = kind === 'call' && typeof a === 'number' && typeof b === 'string' && typeof c === 'string' ? call(a, b, c, d) : send(kind, a, b, c)
      if (kind === 'done' || kind === 'throw') {
        finished = true
        ended()
      }
      return answer
    }
    const { start, deliver } = setup(crossing, toolNamesJson, ...rest, shared, recordedJson)
    return {
      // the run, as one task: settled once the program reported its end
      begin: (main) => {
        start(main)
        return end
      },
      ended: () => end,
      // a reply the host posted (lane 1's port; 0 is a doorbell for the ring)
      post: (call, ok, text, code) => replies.port(call === 0 || typeof call === 'string' ? call : [call, ok, text, code], reply),
    }
  }
