// the types of what typescript code uses from lane.mjs and lane-script.js (documented there)
import type { MessagePort } from 'node:worker_threads'

export declare const handoffBytes: number
export declare const laneSource: string
export declare const layout: Readonly<{
  ringUnits: number
  rings: number
  USED: number
}>
export declare const runsActive: Int32Array
export interface Lane {
  clear(): void
  send(message: unknown): void
  offer(message: unknown): boolean
  take(handle: (message: unknown) => unknown, limit?: number): number
  port(message: unknown, handle: (message: unknown) => unknown): void
  watch(how?: 1 | 2): void
  unwatch(): boolean
  spin(ms: number): boolean
}
export interface Backoff {
  may(ahead: 0 | 1): boolean
  spun(caught: boolean): void
}
export declare function backoff(buffer: SharedArrayBuffer, side?: 0 | 1): Backoff
export declare function burst(ms?: number): () => boolean
export interface LaneCounts {
  ring: number
  port: number
  caught: number
  missed: number
}
export interface HandoffTally {
  add(buffer: SharedArrayBuffer): void
  remove(buffer: SharedArrayBuffer): void
  stats(): { calls: LaneCounts; replies: LaneCounts }
}
export declare function handoffTally(): HandoffTally
export declare function handoffCounts(buffer: SharedArrayBuffer): [LaneCounts, LaneCounts]
export interface LaneOptions {
  receive?: () => { message: unknown } | undefined
  malformed?: () => void
}
export declare function lane(buffer: SharedArrayBuffer, index: 0 | 1, port: MessagePort | { postMessage(message: unknown): void }, options?: LaneOptions): Lane
