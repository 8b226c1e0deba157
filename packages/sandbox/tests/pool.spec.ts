// the pool of src/pool.ts on its own, with a backend whose units are plain objects and whose programs end at once:
// what the shared suites do not reach (a unit that cannot be made, retirement after maxRuns or a full heap)
import { expect } from 'chai'
import type { Program, ProgramReports, SandboxDriver, Unit } from '../src/contract.ts'
import { type PoolOptions, SandboxPool } from '../src/pool.ts'
import type { CodeRunOutcome } from '../src/types.ts'

const MB = 1024 * 1024

interface Fake extends Unit {
  id: number
  disposed: boolean
}

class FakeDriver implements SandboxDriver<Fake> {
  readonly backend = 'fake'
  readonly createFailure = 'could not make a fake'
  made: Fake[] = []
  attempts = 0
  /** what `create` throws, while set */
  broken: string | undefined
  /** the heap a unit reports after a run (undefined: it may not serve again) */
  heap: number | undefined = 0
  /** while set, programs do not end: they wait here */
  held: (() => void)[] | undefined
  /** what a program's cpu reading says, and how many times it was read */
  cpu = 0
  cpuReads = 0

  create(memoryMb: number) {
    this.attempts++
    if (this.broken) throw new Error(this.broken)
    const unit = { id: this.made.length, memoryMb, runs: 0, disposed: false }
    this.made.push(unit)
    return unit
  }

  dispose(unit: Fake) {
    unit.disposed = true
  }

  start(unit: Fake, _program: Program, reports: ProgramReports) {
    const end = () => reports.done(String(unit.id), this.heap)
    if (this.held) this.held.push(end)
    // the program "returns" the unit it ran on
    else queueMicrotask(end)
    return {
      deliver() {},
      cpuUsed: () => {
        this.cpuReads++
        return this.cpu
      },
      end() {},
    }
  }
}

class FakePool extends SandboxPool<Fake> {
  constructor(options: PoolOptions) {
    super(new FakeDriver(), options)
  }

  get fake() {
    return this.driver as FakeDriver
  }
}

const run = (pool: FakePool, memoryMb?: number): Promise<CodeRunOutcome> =>
  pool.run({ code: '', tools: [], call: async () => ({ ok: true, value: 'null' }), signal: new AbortController().signal, limits: memoryMb ? { memoryMb } : {} })

describe('SandboxPool', () => {
  it('warms many units at once (across sandboxes) without a MaxListenersExceededWarning on the host', async () => {
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(warning.name)
    process.on('warning', onWarning)
    const pools = Array.from({ length: 12 }, () => {
      const pool = new FakePool({ poolSize: 1 })
      pool.fake.held = []
      return pool
    })
    try {
      // each pool makes its unit on the next turn and warms it: the warm-up runs are all in progress at once
      while (pools.some((pool) => pool.fake.held!.length === 0)) await new Promise((resolve) => setImmediate(resolve))
      for (const pool of pools) for (const end of pool.fake.held!.splice(0)) end()
      await Promise.all(pools.map((pool) => pool.ready()))
      // a warning is emitted on the next tick
      await new Promise((resolve) => setImmediate(resolve))
      expect(warnings).to.deep.equal([])
    } finally {
      process.off('warning', onWarning)
      await Promise.all(pools.map((pool) => pool.close()))
    }
  })

  it('reports a unit that cannot be made, without making units in a loop, and fills again once one is made', async () => {
    const pool = new FakePool({ poolSize: 2 })
    pool.fake.broken = 'out of fakes'
    await pool.ready()
    expect(await run(pool)).to.deep.include({ ok: false, kind: 'crash', message: 'could not make a fake: out of fakes' })
    // the one made in the background failed, and the run's own: none since
    expect(pool.fake.attempts).to.equal(2)
    pool.fake.broken = undefined
    expect(await run(pool)).to.deep.include({ ok: true, result: '0' })
    await pool.ready()
    expect(pool.fake.made.filter((unit) => !unit.disposed)).to.have.length(2)
    await pool.close()
  })

  it('retires a unit after maxRuns runs of programs, its warm-up not counted', async () => {
    const pool = new FakePool({ poolSize: 1, maxRuns: 3 })
    await pool.ready()
    const results = []
    for (let i = 0; i < 4; i++) results.push(((await run(pool)) as { result: string }).result)
    expect(results.slice(0, 3)).to.deep.equal(['0', '0', '0'])
    expect(results[3]).not.to.equal('0')
    expect(pool.fake.made[0]).to.include({ runs: 3, disposed: true })
    await pool.close()
  })

  it('gives every program a unit of its own at maxRuns 1, warmed ones included', async () => {
    const pool = new FakePool({ poolSize: 2, maxRuns: 1 })
    await pool.ready()
    const outcomes = []
    // back to back, and while the pool is still warming the replacements
    for (let i = 0; i < 3; i++) outcomes.push(await run(pool))
    outcomes.push(...(await Promise.all([run(pool), run(pool), run(pool)])))
    expect(outcomes.map((outcome) => outcome.ok)).to.deep.equal([true, true, true, true, true, true])
    const units = outcomes.map((outcome) => (outcome as { result: string }).result)
    expect(new Set(units).size).to.equal(6)
    for (const id of units) expect(pool.fake.made[Number(id)]).to.include({ runs: 1, disposed: true })
    await pool.close()
  })

  it('counts a unit out on a run as one of poolSize: a replacement made meanwhile makes no other, and the unit comes back', async () => {
    const pool = new FakePool({ poolSize: 2 })
    await pool.ready()
    expect(pool.fake.made).to.have.length(2)
    const turns = async (n: number) => {
      for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve))
    }
    pool.fake.held = []
    // one run stays out on a unit while the other unit may not serve again and is replaced
    const long = run(pool)
    pool.fake.heap = undefined
    const short = run(pool)
    await turns(2)
    expect(pool.fake.held).to.have.length(2)
    pool.fake.held.pop()!()
    expect(await short).to.deep.include({ ok: true })
    pool.fake.heap = 0
    // the replacement is made on a later turn and warmed (its warm-up is held too): let it end
    while (pool.fake.held.length < 2) await turns(1)
    pool.fake.held.pop()!()
    await turns(10)
    // the pool holds two again, counting the one out: no fourth unit is made
    expect(pool.fake.made).to.have.length(3)
    pool.fake.held.pop()!()
    const back = Number(((await long) as { result: string }).result)
    await turns(10)
    // and the unit that comes back serves again, rather than being disposed as one too many
    expect(pool.fake.made).to.have.length(3)
    expect(pool.fake.made[back].disposed).to.equal(false)
    pool.fake.held = undefined
    const next = await run(pool)
    expect(pool.fake.made[Number((next as { result: string }).result)].disposed).to.equal(false)
    expect(pool.fake.made.filter((unit) => !unit.disposed)).to.have.length(2)
    await pool.close()
  })

  it('keeps the units made beyond poolSize for the runs that follow, and ends them once none came for surplusLingerMs', async () => {
    const pool = new FakePool({ poolSize: 1, maxConcurrent: 4, surplusLingerMs: 50 })
    await pool.ready()
    expect(pool.fake.made).to.have.length(1)
    const wave = async () => {
      pool.fake.held = []
      const runs = Array.from({ length: 4 }, () => run(pool))
      while (pool.fake.held.length < 4) await new Promise((resolve) => setImmediate(resolve))
      for (const end of pool.fake.held.splice(0)) end()
      pool.fake.held = undefined
      for (const outcome of await Promise.all(runs)) expect(outcome).to.deep.include({ ok: true })
    }
    // four runs at once: the pooled unit and three made on demand
    await wave()
    expect(pool.fake.made).to.have.length(4)
    expect(pool.fake.made.filter((unit) => unit.disposed)).to.have.length(0)
    // four more at once take those four: none is made (each made one of its own, and ended it after its run)
    await wave()
    expect(pool.fake.made).to.have.length(4)
    // with no run for surplusLingerMs, the pool is back to poolSize (a timer fires late on a loaded machine: waited for,
    // up to 5 s, not assumed after a fixed pause)
    const live = () => pool.fake.made.filter((unit) => !unit.disposed).length
    for (const since = Date.now(); live() > 1 && Date.now() - since < 5000; ) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(live()).to.equal(1)
    expect((await run(pool)).ok).to.equal(true)
    expect(pool.fake.made).to.have.length(4)
    await pool.close()
    expect(pool.fake.made.filter((unit) => !unit.disposed)).to.have.length(0)
  })

  it('refuses a surplusLingerMs that is not a number of ms a timer takes', () => {
    for (const surplusLingerMs of [-1, Number.NaN, 2 ** 31]) expect(() => new FakePool({ surplusLingerMs })).to.throw(RangeError, /surplusLingerMs/)
  })

  it('refuses a maxRuns that is not a whole number of at least 1', () => {
    for (const maxRuns of [0, -1, 1.5, Number.NaN])
      expect(() => new FakePool({ poolSize: 0, maxRuns })).to.throw(RangeError, /maxRuns .* must be a whole number of at least 1/)
  })

  it("serves again while what runs left is under half its memoryMb, the unit's own share not counted against it", async () => {
    const pool = new FakePool({ poolSize: 1, limits: { memoryMb: 8 } })
    // what a worker holds of its own after its warm-up: its runtime, the prelude, a context
    pool.fake.heap = 6 * MB
    await pool.ready()
    const results = []
    for (let i = 0; i < 3; i++) {
      results.push(((await run(pool)) as { result: string }).result)
      pool.fake.heap += MB
    }
    expect(results).to.deep.equal(['0', '0', '0'])
    // 4 MB left beyond its own share: half its memoryMb
    pool.fake.heap = 10 * MB
    expect(await run(pool)).to.deep.include({ ok: true, result: '0' })
    expect(pool.fake.made[0].disposed).to.equal(true)
    await pool.close()
  })

  // a driver that cannot measure what its units hold leaves `heap` out (contract.ts): each unit serves one run. its warm
  // pool's warm-ups were then discarded twice and the run that waited on them ended crash, "the sandbox was closed"
  it('serves every run of a driver whose units report no heap, each on a unit of its own', async () => {
    const pool = new FakePool({ poolSize: 1 })
    pool.fake.heap = undefined
    try {
      const outcomes = [await run(pool), await run(pool), await run(pool)]
      expect(outcomes.map((outcome) => outcome.ok)).to.deep.equal([true, true, true])
      const ran = outcomes.map((outcome) => (outcome as { result: string }).result)
      expect(new Set(ran).size, `units ${ran}`).to.equal(3)
      await pool.ready()
    } finally {
      await pool.close()
    }
    expect(pool.fake.made.every((unit) => unit.disposed)).to.equal(true)
  })

  it('takes a cpu reading below 0 as none spent, asking again no sooner than cpuMs later', async () => {
    // a reading far below 0 once made the next poll's delay more than a timer takes: node cut it to 1 ms, with a
    // TimeoutOverflowWarning on the host's stderr at each of the ~300 polls before wallMs
    const pool = new FakePool({ poolSize: 1, limits: { cpuMs: 20, wallMs: 300 } })
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(warning.name)
    process.on('warning', onWarning)
    try {
      await pool.ready()
      pool.fake.held = []
      pool.fake.cpu = -1e308
      const outcome = await run(pool)
      expect(outcome).to.deep.include({ ok: false, kind: 'timeout' })
      expect(!outcome.ok && outcome.message).to.match(/wall-clock/)
      expect(pool.fake.cpuReads).to.be.within(1, 300 / 20 + 1)
      expect(warnings).to.deep.equal([])
    } finally {
      process.off('warning', onWarning)
      await pool.close()
    }
  })

  it('discards a unit that may not serve again, and one made for another memoryMb', async () => {
    const pool = new FakePool({ poolSize: 1, limits: { memoryMb: 32 } })
    await pool.ready()
    expect(await run(pool, 48)).to.deep.include({ ok: true, result: '1' })
    expect(pool.fake.made[1]).to.include({ memoryMb: 48, disposed: true })
    pool.fake.heap = undefined
    expect(await run(pool)).to.deep.include({ ok: true, result: '0' })
    expect(pool.fake.made[0].disposed).to.equal(true)
    // its replacement is made on a later turn, and warmed
    pool.fake.heap = 0
    await pool.ready()
    expect(pool.fake.made.at(-1)).to.include({ memoryMb: 32, disposed: false })
    await pool.close()
    expect(pool.fake.made.every((unit) => unit.disposed)).to.equal(true)
  })
})
