// the conformance suites every CodeRuntime backend must pass, published for backends outside this package:
// `describeHazards` and `describePool` (limits, isolation, the pool) and `describeHostile` (a host that survives); and
// `describeHandoff` for a backend whose nested calls hand off with a spin; and `tiersOf`, the tiers a spec runs a case on
export * from './handoff.ts'
export * from './hazards.ts'
export * from './hostile.ts'
export * from './tiers.ts'
