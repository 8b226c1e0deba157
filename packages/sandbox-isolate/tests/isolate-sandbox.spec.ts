import { describeHazards, describePool, hazardLimits } from '@faber/sandbox/hazards'
import { describeHostile } from '@faber/sandbox/hostile'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

describeHazards('isolated-vm', () => new IsolateSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('isolated-vm', (poolSize, maxConcurrent) => new IsolateSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), IsolateSandboxService)
describeHostile('isolated-vm')
