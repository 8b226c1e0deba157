import WorkerSandboxService, { WorkerSandbox } from '../src/index.ts'
import { describeHazards, describeHostile, describePool, hazardLimits } from '../src/testing/index.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')
