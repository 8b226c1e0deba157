import WorkerSandboxService, { WorkerSandbox } from '../src/index.ts'
import { describeHazards, describeHostile, describePool, hazardLimits } from '../src/testing/index.ts'

describeHazards('worker-vm', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits }))
describePool('worker-vm', (poolSize, maxConcurrent) => new WorkerSandbox({ poolSize, maxConcurrent, limits: hazardLimits }), WorkerSandboxService)
describeHostile('worker-vm')
// the spinning hand-off (off by default): a generous spinMs so that both sides spin on this machine too
describeHazards('worker-vm, spinning hand-off', () => new WorkerSandbox({ poolSize: 2, limits: hazardLimits, spinMs: 1 }))
