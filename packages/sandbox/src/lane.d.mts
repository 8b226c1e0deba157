// the types of lane.mjs, which is plain js because the worker's entry loads it too
import type { MessagePort } from 'node:worker_threads'

export declare const handoffBytes: number
export declare const handoffWaited: number
export interface Lane {
  send(message: unknown): void
  take(handle: (message: unknown) => unknown, limit?: number): number
  port(message: unknown, handle: (message: unknown) => unknown): void
  watch(): void
  unwatch(): boolean
  spin(ms: number): boolean
}
export interface Backoff {
  called(): void
  may(ahead: 0 | 1): boolean
  spun(caught: boolean): void
}
export declare function backoff(buffer: SharedArrayBuffer): Backoff
export interface LaneCounts {
  ring: number
  port: number
  caught: number
  missed: number
}
export declare function handoffCounts(buffer: SharedArrayBuffer): [LaneCounts, LaneCounts]
export declare function lane(buffer: SharedArrayBuffer, index: 0 | 1, port: MessagePort): Lane
