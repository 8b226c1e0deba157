import { type BridgeReply, type CodeRunRequest, MAX_JSON_DEPTH } from '@faber/core'
import { expect } from 'chai'
import { RunBridge } from '../src/bridge.ts'
import { report } from '../src/contract.ts'
import { preludeSource } from '../src/prelude.mjs'

const limits = { cpuMs: 1000, wallMs: 1000, memoryMb: 16, outputBytes: 1024 }

function bridgeOf(request: Partial<CodeRunRequest>) {
  const answers: [number, BridgeReply][] = []
  const bridge = new RunBridge(
    { code: '', tools: ['echo'], call: async () => ({ ok: true, value: 'null' }), signal: new AbortController().signal, ...request },
    limits,
    () => false,
    () => {},
    (call, reply) => void answers.push([call, reply]),
  )
  return { bridge, answers }
}

describe("the run bridge's host side", () => {
  it('hands a reply that came back at once (callNow) to the program on a later microtask, in call order', async () => {
    const { bridge, answers } = bridgeOf({ callNow: (_, json) => ({ ok: true, value: json }) })
    bridge.call(1, 'echo', '1')
    bridge.call(2, 'echo', '2')
    bridge.call(3, 'nope', '3')
    // never from inside the report of the call it answers
    expect(answers).to.deep.equal([])
    expect(bridge.waiting).to.equal(0)
    await Promise.resolve()
    expect(answers).to.deep.equal([
      [1, { ok: true, value: '1' }],
      [2, { ok: true, value: '2' }],
      [3, { ok: false, message: 'nope is not a tool of this run' }],
    ])
  })

  it('answers, in order, a call made while a reply is handed in (as a spinning backend does), batch after batch', async () => {
    const answered: number[] = []
    let bridge!: RunBridge
    bridge = new RunBridge(
      {
        code: '',
        tools: ['echo'],
        call: async () => ({ ok: true, value: 'null' }),
        callNow: (_, json) => ({ ok: true, value: json }),
        signal: new AbortController().signal,
      },
      limits,
      () => false,
      () => {},
      (call, reply) => {
        answered.push(call)
        expect(reply).to.deep.equal({ ok: true, value: String(call) })
        // the program's next call comes while its reply is handed in: up to five in a row, then it awaits something else
        if (call % 5 !== 0) bridge.call(call + 1, 'echo', String(call + 1))
      },
    )
    for (const batch of [1, 6, 11]) {
      bridge.call(batch, 'echo', String(batch))
      expect(answered).to.have.length(batch - 1)
      await Promise.resolve()
      expect(answered).to.deep.equal(Array.from({ length: batch + 4 }, (_, i) => i + 1))
    }
  })

  it('answers a pending callNow reply, a throwing callNow and a backend call answering with a thenable', async () => {
    let release!: (reply: BridgeReply) => void
    const pending = bridgeOf({ callNow: () => new Promise<BridgeReply>((resolve) => (release = resolve)) })
    pending.bridge.call(1, 'echo', '{}')
    expect(pending.bridge.waiting).to.equal(1)
    release({ ok: true, value: '7' })
    await new Promise((resolve) => setImmediate(resolve))
    expect(pending.answers).to.deep.equal([[1, { ok: true, value: '7' }]])
    expect(pending.bridge.waiting).to.equal(0)

    const throwing = bridgeOf({
      callNow: () => {
        throw new Error('host broke')
      },
    })
    throwing.bridge.call(1, 'echo', '{}')
    await Promise.resolve()
    expect(throwing.answers).to.deep.equal([[1, { ok: false, message: 'host broke' }]])

    // a backend without callNow: whatever call answers is awaited, a thenable included
    const thenable = bridgeOf({
      // biome-ignore lint/suspicious/noThenProperty: a thenable is what this checks
      call: () => ({ then: (resolve: (reply: BridgeReply) => void) => resolve({ ok: true, value: '1' }) }) as unknown as Promise<BridgeReply>,
    })
    thenable.bridge.call(1, 'echo', '{}')
    await new Promise((resolve) => setImmediate(resolve))
    expect(thenable.answers).to.deep.equal([[1, { ok: true, value: '1' }]])
  })

  it('answers a host call that throws or rejects with something whose message cannot be read, and nothing escapes', async () => {
    // no prototype: String() of it throws; a getter that throws on .message
    const unreadable = [
      Object.create(null),
      Object.defineProperty(new Error(), 'message', {
        get: () => {
          throw new Error('no')
        },
      }),
    ]
    for (const thrown of unreadable) {
      for (const how of ['throws', 'rejects'] as const) {
        const { bridge, answers } = bridgeOf({
          callNow: () => {
            if (how === 'rejects') return Promise.reject(thrown)
            throw thrown
          },
        })
        bridge.call(1, 'echo', '{}')
        await new Promise((resolve) => setImmediate(resolve))
        expect(answers, how).to.deep.equal([[1, { ok: false, message: 'an error that could not be shown' }]])
      }
    }
  })

  it('ends the run as crash when the backend cannot hand a reply in, at once or later, and nothing escapes to the host', async () => {
    for (const later of [false, true]) {
      const failures: string[] = []
      let settled = false
      const answered: number[] = []
      const bridge = new RunBridge(
        {
          code: '',
          tools: ['echo'],
          call: async () => ({ ok: true, value: 'null' }),
          callNow: later ? async () => ({ ok: true, value: 'null' }) : () => ({ ok: true, value: 'null' }),
          signal: new AbortController().signal,
        },
        limits,
        () => settled,
        (outcome) => {
          settled = true
          failures.push(outcome.ok ? 'ok' : `${outcome.kind}: ${outcome.message}`)
        },
        (call) => {
          answered.push(call)
          throw new Error('the unit is gone')
        },
      )
      bridge.call(1, 'echo', '{}')
      bridge.call(2, 'echo', '{}')
      await new Promise((resolve) => setImmediate(resolve))
      expect(failures, String(later)).to.deep.equal(['crash: a reply could not be handed to the program: the unit is gone'])
      expect(answered, String(later)).to.deep.equal([1])
    }
  })
})

describe("the prelude's bound on a value's nesting", () => {
  it("is the host's MAX_JSON_DEPTH, so that what the prelude sends the host takes and what it refuses the host would", () => {
    const bound = /\n {2}const maxJsonDepth = (\d+)\n/.exec(preludeSource)
    expect(bound, 'prelude-script.js declares maxJsonDepth').to.not.equal(null)
    expect(Number(bound![1])).to.equal(MAX_JSON_DEPTH)
  })
})

// what a sandbox process a program took over may send as a report (the process tier checks it with this one report()):
// each lands on a run's real bridge, and what the run ends with is what the host would be told
describe('the one check of a report, under forged values', () => {
  const ended = (kind: unknown, a?: unknown, b?: unknown, c?: unknown, d?: unknown) => {
    let outcome: unknown
    const recorded: number[][] = []
    const values = { replay: [], record: (read: number[]) => void recorded.push(read) }
    const bridge = new RunBridge(
      { code: '', tools: ['echo'], call: async () => ({ ok: true, value: 'null' }), signal: new AbortController().signal, values },
      limits,
      () => outcome !== undefined,
      (end) => (outcome = end),
      () => {},
    )
    const taken = report(bridge, kind, a, b, c, d)
    return { taken, outcome, recorded }
  }

  it('takes a position only as two whole numbers from 1: a line past a safe integer is no line, on every channel alike', () => {
    expect(ended('throw', 'Error: x', 12, 5).outcome).to.deep.include({ kind: 'exception', line: 12, column: 5 })
    // Infinity is what the prelude read from a stack naming a 400-digit line; a json channel carries it as null
    for (const [line, column] of [
      [Number.POSITIVE_INFINITY, 3],
      [null, 3],
      [3, Number.POSITIVE_INFINITY],
      [1e20, 3],
      [Number.NaN, 3],
      [-4, 3],
      [0, 0],
      [2.5, 3],
      ['7', 3],
      [7, undefined],
    ]) {
      const { taken, outcome } = ended('throw', 'Error: x', line, column)
      expect(taken).to.equal(true)
      expect(outcome, `${line}:${column}`).to.deep.equal({ ok: false, kind: 'exception', message: 'Error: x', logs: [] })
    }
  })

  it('records clock readings and random numbers only as finite numbers', () => {
    expect(ended('values', '[1, 0.5]').recorded).to.deep.equal([[1, 0.5]])
    for (const forged of ['[1e999]', '[-1e999]', '[1, "2"]', '{"0": 1}', 'not json']) {
      const { taken, recorded } = ended('values', forged)
      expect(taken, forged).to.equal(false)
      expect(recorded, forged).to.deep.equal([])
    }
  })
})
