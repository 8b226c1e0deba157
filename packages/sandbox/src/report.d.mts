// the types of report.mjs (documented there)
import type { ProgramReports } from './contract.ts'

export declare function report(reports: ProgramReports, kind: unknown, a: unknown, b: unknown, c: unknown, d?: unknown): boolean
