import { expect } from 'chai'
import { Logger } from 'cordis'
import { appendRace, swapRace } from '../bench/fs-race.ts'

// the races of `pnpm bench fs-race`, short: another process appends to a file the fs tools edit, and swaps names
// inside the root for links out of it while they read
describe('fs tools racing another process (bench/fs-race.ts, short)', function () {
  // a few seconds on a quiet machine; minutes when CI shares its cores (it passed the 60 s bound once at load 12)
  this.timeout(240_000)
  before(() => {
    Logger.levels.base = 0
  })

  it('loses no acknowledged append and no successful edit', async () => {
    const race = await appendRace(2500)
    expect(race.appends, 'the other process appended').to.be.greaterThan(50)
    expect(race.edits, 'some edits went through').to.be.greaterThan(0)
    expect(race.lostAppends).to.equal(0)
    expect(race.lostEdits).to.equal(0)
  })

  it('never returns anything from outside the root', async () => {
    const race = await swapRace(2000)
    expect(race.swaps, 'the other process swapped').to.be.greaterThan(50)
    expect(race.reads - race.refused, 'some reads went through').to.be.greaterThan(0)
    expect(race.outsideReads).to.equal(0)
  })
})
