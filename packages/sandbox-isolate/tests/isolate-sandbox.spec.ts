import { describeHazards, describeHostile, describePool, hazardLimits } from '@faber/sandbox/testing'
import IsolateSandboxService, { IsolateSandbox } from '../src/index.ts'

describeHazards('isolated-vm', () => new IsolateSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('isolated-vm', (poolSize, maxConcurrent) => new IsolateSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), IsolateSandboxService)
describeHostile('isolated-vm')
