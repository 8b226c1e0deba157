// the conformance suites every CodeRuntime backend must pass, published for backends outside this package (the README's
// "Testing a backend" says what each checks)
export * from './handoff.ts'
export * from './hazards.ts'
export * from './hostile.ts'
export * from './tiers.ts'
