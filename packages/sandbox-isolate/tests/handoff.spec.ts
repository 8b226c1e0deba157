// the hand-off of nested calls on the isolate's own thread (the in-process tier): with spinning off, by default, and with
// a generous spinMs so that both sides spin on a loaded machine too. each case gives the same outcome every way
import { describeHandoff, hazardLimits } from '@faber/sandbox/testing'
import { expect } from 'chai'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

describeHandoff(
  'isolated-vm',
  (options) => new IsolateSandbox({ ...options, limits: hazardLimits }),
  IsolateSandboxService,
  [0, undefined, 1],
  ({ run, kind, roomy }) => {
    it('answers a busy host within a cpu budget smaller than the time the isolate spent spinning for it', async () => {
      // 200 answers that each take the host's thread a millisecond: the isolate spins for them (or sleeps), and
      // neither is the program's cpu
      const code = 'let n = 0\nfor (let i = 0; i < 200; i++) n += (await tools.busy({ i })).i\nreturn n'
      expect(kind(await run(code, undefined, { cpuMs: 150, wallMs: 20000 }))).to.equal('ok 19900')
    })

    it('goes on calling right when the program replaced the intrinsics the hand-off uses, and the next run is whole', async () => {
      // the driver captured what it uses before the program ran: these change nothing of its hand-off
      const tamper = `const { defineProperty } = Object
String.prototype.charCodeAt = () => 65
String.prototype.indexOf = () => -1
String.prototype.slice = () => '9'
String.fromCharCode = () => '{'
Atomics.load = () => 1
Atomics.store = () => 0
Atomics.add = () => 0
Atomics.sub = () => 0
Atomics.compareExchange = () => 0
Date.now = () => 0
defineProperty(Object.getPrototypeOf(Int32Array.prototype), 'length', { get: () => 1e9 })
defineProperty(Int32Array.prototype, 'constructor', { get: () => { throw new Error('species') } })
defineProperty(Array.prototype, '0', { set: () => { throw new Error('index') }, get: () => 7, configurable: true })
Array.prototype.push = () => { throw new Error('push') }
Function.prototype.call = () => 0
Function.prototype.apply = () => 0
Promise.prototype.then = function () { throw new Error('then') }
`
      const code = `${tamper}
let n = 0
for (let i = 0; i < 150; i++) n += (await tools.echo({ i, s: 'é😀' + 'x'.repeat(i * 40) })).i
return n`
      const outcome = await run(code, undefined, { cpuMs: 5000, wallMs: 10000 })
      // the prelude and the program may trip over what they replaced themselves; the hand-off may not, nor the host
      if (outcome.ok) expect(outcome.result).to.equal('11175')
      else expect(outcome.kind).to.equal('exception')
      expect(kind(await run('let n = 0\nfor (let i = 0; i < 50; i++) n += (await tools.echo({ i })).i\nreturn n', undefined, roomy))).to.equal('ok 1225')
    })
  },
)
