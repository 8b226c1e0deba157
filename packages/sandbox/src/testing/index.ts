// the conformance suites every CodeRuntime backend must pass, published for backends outside this package:
// `describeHazards` and `describePool` (limits, isolation, the pool) and `describeHostile` (a host that survives)
export * from './hazards.ts'
export * from './hostile.ts'
