// text decoding and the numbered-line view read returns.

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
const SNIFF = 8192

/** the UTF-8 text of a file, or undefined when it looks binary (a NUL byte up front, or invalid UTF-8) */
export function decodeText(bytes: Uint8Array): string | undefined {
  if (looksBinary(bytes)) return undefined
  try {
    return decoder.decode(bytes)
  } catch {
    return undefined
  }
}

export function looksBinary(bytes: Uint8Array): boolean {
  return bytes.subarray(0, SNIFF).includes(0)
}

/** the file's lines without their terminators; a final newline does not start another line */
export function splitLines(text: string): string[] {
  if (text === '') return []
  const lines = text.split('\n')
  if (lines.at(-1) === '') lines.pop()
  for (let i = 0; i < lines.length; i++) if (lines[i].endsWith('\r')) lines[i] = lines[i].slice(0, -1)
  return lines
}

export function clip(line: string, max: number): string {
  return line.length > max ? `${line.slice(0, max)}… [line cut at ${max} characters]` : line
}

/** `cat -n` style: the 1-based number right-aligned in six columns, a tab, the line */
export function numbered(lines: readonly string[], first: number, maxChars: number): string {
  let out = ''
  for (let i = 0; i < lines.length; i++) {
    if (i) out += '\n'
    out += `${String(first + i).padStart(6)}\t${clip(lines[i], maxChars)}`
  }
  return out
}

export function countOccurrences(text: string, needle: string): number {
  let count = 0
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++
  return count
}
