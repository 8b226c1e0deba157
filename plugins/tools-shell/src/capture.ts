// bounded capture of a stream: the first `head` bytes and the last `tail` bytes are kept, the middle is counted
// and elided with a note. a job's output is taken window by window, each window bounded the same way.

export interface Captured {
  /** the kept text; when bytes were elided, head + a note naming how many + tail */
  text: string
  /** every byte the stream produced in this window */
  bytes: number
  /** bytes left out of `text` */
  elided: number
}

export class Capture {
  private headChunks: Buffer[] = []
  private headBytes = 0
  private tail: Buffer
  private tailStart = 0
  private tailBytes = 0
  private total = 0

  constructor(
    private readonly head: number,
    private readonly tailSize: number,
  ) {
    this.tail = Buffer.alloc(tailSize)
  }

  push(chunk: Buffer) {
    this.total += chunk.length
    let rest = chunk
    if (this.headBytes < this.head) {
      const take = Math.min(this.head - this.headBytes, rest.length)
      this.headChunks.push(rest.subarray(0, take))
      this.headBytes += take
      rest = rest.subarray(take)
    }
    if (!rest.length || !this.tailSize) return
    // a ring of the last tailSize bytes
    if (rest.length >= this.tailSize) {
      rest.copy(this.tail, 0, rest.length - this.tailSize)
      this.tailStart = 0
      this.tailBytes = this.tailSize
      return
    }
    for (let i = 0; i < rest.length; ) {
      const at = (this.tailStart + this.tailBytes) % this.tailSize
      const n = Math.min(rest.length - i, this.tailSize - at)
      rest.copy(this.tail, at, i, i + n)
      i += n
      const over = this.tailBytes + n - this.tailSize
      if (over > 0) {
        this.tailStart = (this.tailStart + over) % this.tailSize
        this.tailBytes = this.tailSize
      } else this.tailBytes += n
    }
  }

  /** what was captured since the last take; starts a new window */
  take(): Captured {
    const head = Buffer.concat(this.headChunks)
    const tail = Buffer.alloc(this.tailBytes)
    const first = Math.min(this.tailBytes, this.tailSize - this.tailStart)
    this.tail.copy(tail, 0, this.tailStart, this.tailStart + first)
    this.tail.copy(tail, first, 0, this.tailBytes - first)
    const bytes = this.total
    this.headChunks = []
    this.headBytes = 0
    this.tailStart = 0
    this.tailBytes = 0
    this.total = 0
    const elided = bytes - head.length - tail.length
    if (elided === 0) return { text: Buffer.concat([head, tail]).toString('utf8'), bytes, elided: 0 }
    const kept = wholeCharacters(head, 'end')
    const end = wholeCharacters(tail, 'start')
    const dropped = elided + (head.length - kept.length) + (tail.length - end.length)
    const note = `\n[… ${dropped} bytes elided (the output is capped at its first ${this.head} and last ${this.tailSize} bytes) …]\n`
    return { text: kept.toString('utf8') + note + end.toString('utf8'), bytes, elided: dropped }
  }
}

/** trims a UTF-8 sequence cut by the elision, at the buffer's end (head) or start (tail) */
function wholeCharacters(bytes: Buffer, side: 'start' | 'end'): Buffer {
  if (side === 'start') {
    let i = 0
    while (i < bytes.length && i < 3 && (bytes[i] & 0xc0) === 0x80) i++
    return bytes.subarray(i)
  }
  // walk back over continuation bytes to the lead byte; drop the sequence if it is incomplete
  let i = bytes.length - 1
  let continuation = 0
  while (i >= 0 && continuation < 3 && (bytes[i] & 0xc0) === 0x80) {
    i--
    continuation++
  }
  if (i < 0) return bytes
  const lead = bytes[i]
  const need = lead >= 0xf0 ? 3 : lead >= 0xe0 ? 2 : lead >= 0xc0 ? 1 : 0
  return need > continuation ? bytes.subarray(0, i) : bytes
}
