// the types of report.mjs
import type { ProgramReports } from './contract.ts'

/**
 * the one check of what a program reports through an untyped channel, `(kind, a, b, c, d)`, handed on to `reports` when
 * it is well formed; true for a call taken or a line logged (report.mjs)
 */
export declare function report(reports: ProgramReports, kind: unknown, a: unknown, b: unknown, c: unknown, d?: unknown): boolean
