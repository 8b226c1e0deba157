import WorkerSandboxService, { WorkerSandbox } from '../src/index.ts'
import { describeHazards, describePool, hazardLimits } from './hazards.ts'
import { describeHostile } from './hostile.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')
