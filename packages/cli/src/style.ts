// terminal output: colors on a TTY (never when piped or under NO_COLOR), and a spinner line on a TTY only.

// raw SGR codes: util.styleText decides on its own whether a stream gets color, and we decide it here
const CODES = {
  bold: [1, 22],
  dim: [2, 22],
  italic: [3, 23],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  blue: [34, 39],
  magenta: [35, 39],
  cyan: [36, 39],
  gray: [90, 39],
} as const

export type Color = keyof typeof CODES

export function colorEnabled(stream: NodeJS.WriteStream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  if ('NO_COLOR' in env && env.NO_COLOR !== '') return false
  if (env.FORCE_COLOR && env.FORCE_COLOR !== '0') return true
  return Boolean(stream.isTTY) && env.TERM !== 'dumb'
}

export interface Style {
  readonly enabled: boolean
  paint(text: string, ...colors: Color[]): string
}

export function createStyle(enabled: boolean): Style {
  return {
    enabled,
    paint: (text, ...colors) => (enabled ? colors.reduce((out, color) => `\x1b[${CODES[color][0]}m${out}\x1b[${CODES[color][1]}m`, text) : text),
  }
}

// what a program prints, a model says or a log holds would be obeyed by the terminal (clear it, retitle it, overwrite a
// line with \r): control characters are shown, not sent. tabs and line breaks stay
export function visible(text: string) {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`)
}

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏']

/** a one-line spinner on a TTY; a no-op elsewhere, so piped output stays clean */
export class Spinner {
  private timer?: NodeJS.Timeout
  private frame = 0
  private text: string | (() => string) = ''
  private held = false

  constructor(private stream: NodeJS.WriteStream = process.stderr) {}

  get active() {
    return this.timer !== undefined
  }

  /** shows `text` (a function is asked again on every frame, for a line that changes: counts, elapsed time) */
  start(text: string | (() => string)) {
    this.text = text
    if (!this.stream.isTTY || this.held) return
    if (!this.timer) {
      this.timer = setInterval(() => this.render(), 80)
      this.timer.unref()
    }
    this.render()
  }

  private render() {
    const text = typeof this.text === 'function' ? this.text() : this.text
    this.stream.write(`\r\x1b[2K${FRAMES[this.frame++ % FRAMES.length]} ${text}`)
  }

  /** stops and stays stopped (a question is being asked on the terminal) until `release` */
  hold() {
    this.stop()
    this.held = true
  }

  release() {
    this.held = false
  }

  stop() {
    if (!this.timer) return
    clearInterval(this.timer)
    this.timer = undefined
    this.stream.write('\r\x1b[2K')
  }
}
