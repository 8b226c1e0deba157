// shell-command patterns for rules and grants (`command: 'git diff *'`), matched against a call's `command`
// argument. the two decisions match differently, each in the direction that fails closed:
// - an allow matches only a command the shell runs as exactly one simple command with no expansion at all (no
//   `;`, `&`, `|`, newline, redirection, `$`, backtick, glob, `~`, backslash, ...), whose words match the pattern's
//   words one for one. anything else is not allowed by the pattern and falls through to the next answerer.
// - a reject matches when the pattern's words occur anywhere in any piece of the command, the pieces cut at every
//   operator and substitution, quotes and backslashes dropped: `ls; sudo rm -rf /` meets `rm -rf *`.

// characters that mean nothing to the shell outside quotes (`=` only forms an assignment before the program name,
// where a pattern's literal first word would not match it)
const PLAIN = /[A-Za-z0-9_\-./:=,+@%^]/
// inside double quotes everything but these is literal
const DOUBLE_SPECIAL = /["$`\\!]/

function isControl(c: string) {
  return c < ' ' || c === '\x7f'
}

export interface Word {
  text: string
  /** positions of `*` that were written unquoted (only patterns may have them) */
  stars: number[]
}

/**
 * the words of `text` when the shell would run it as one simple command with nothing expanded; undefined when it
 * would not (or cannot be sure). `patternStars` lets unquoted `*` through, for parsing patterns.
 */
export function simpleWords(text: string, patternStars = false): Word[] | undefined {
  const words: Word[] = []
  let current: Word | undefined
  let i = 0
  while (i < text.length) {
    const c = text[i]
    if (c === ' ' || c === '\t') {
      if (current) words.push(current)
      current = undefined
      i++
      continue
    }
    // control characters (a newline separates commands) are never part of a plain command
    if (isControl(c)) return undefined
    current ??= { text: '', stars: [] }
    if (c === "'") {
      const end = text.indexOf("'", i + 1)
      if (end < 0) return undefined
      const inner = text.slice(i + 1, end)
      if ([...inner].some(isControl)) return undefined
      current.text += inner
      i = end + 1
    } else if (c === '"') {
      let j = i + 1
      while (j < text.length && !DOUBLE_SPECIAL.test(text[j])) {
        if (isControl(text[j])) return undefined
        j++
      }
      if (text[j] !== '"') return undefined
      current.text += text.slice(i + 1, j)
      i = j + 1
    } else if (c === '*' && patternStars) {
      current.stars.push(current.text.length)
      current.text += '*'
      i++
    } else if (PLAIN.test(c)) {
      // `#` would start a comment and `~` expand only at a word's start, `=` only matters before the program:
      // the first two are not PLAIN at all, the last is matched literally
      current.text += c
      i++
    } else {
      return undefined
    }
  }
  if (current) words.push(current)
  return words.length ? words : undefined
}

/**
 * a pattern word against a command word: literal, with its unquoted `*` matching any run of characters. a greedy
 * scan that backs up only to the last star, so it takes at most (pattern × word) steps: a regular expression with
 * several `.*` backtracks polynomially, and a long command word would stall the host while approval waits.
 */
function wordMatches(pattern: Word, word: string): boolean {
  const text = pattern.text
  const star = new Set(pattern.stars)
  let p = 0
  let w = 0
  let lastStar = -1
  let resume = 0
  while (w < word.length) {
    if (p < text.length && star.has(p)) {
      lastStar = p++
      resume = w
    } else if (p < text.length && text[p] === word[w]) {
      p++
      w++
    } else if (lastStar >= 0) {
      // the last star takes one more character
      p = lastStar + 1
      w = ++resume
    } else return false
  }
  while (p < text.length && star.has(p)) p++
  return p === text.length
}

function isRest(word: Word) {
  return word.text === '*' && word.stars.length === 1
}

/** pattern words against command words from `start`; a lone `*` last matches any further words (none included) */
function wordsMatch(pattern: Word[], words: string[], start: number, whole: boolean): boolean {
  for (let k = 0; k < pattern.length; k++) {
    const p = pattern[k]
    if (k === pattern.length - 1 && isRest(p)) return true
    const word = words[start + k]
    if (word === undefined || !wordMatches(p, word)) return false
  }
  return !whole || start + pattern.length === words.length
}

/**
 * the words of every piece of a command, for reject patterns: cut at operators, redirections, substitutions and
 * grouping, with quotes and backslashes removed. deliberately rough: it over-matches rather than under-matches.
 */
export function roughPieces(command: string): string[][] {
  const pieces: string[][] = []
  for (const piece of command.split(/[;&|\n\r<>()`{}]|\$\(|\$\{/)) {
    const words = piece
      .replace(/['"\\]/g, '')
      .split(/[\s]+/)
      .filter((word) => word !== '')
    if (words.length) pieces.push(words)
  }
  return pieces
}

export type CommandMatcher = (command: string) => boolean

/**
 * compiles a command pattern for a decision: `allow` matches simple commands word for word, `reject` matches the
 * pattern anywhere in any piece of any command. throws a TypeError saying what is wrong with the pattern.
 */
export function compileCommandPattern(pattern: string, decision: 'allow' | 'reject'): CommandMatcher {
  if (typeof pattern !== 'string') throw new TypeError('command must be a string such as "git diff *"')
  const words = simpleWords(pattern, true)
  if (!words) {
    throw new TypeError(
      `command pattern ${JSON.stringify(pattern)} is not a plain command: write words separated by spaces, quote special characters, ` +
        'and use * for "any text" in a word or, as the last word, for "any further arguments"',
    )
  }
  if (isRest(words[0]) && words.length === 1 && decision === 'reject') {
    throw new TypeError('command pattern "*" would reject every command; use a tool rule without command instead')
  }
  if (decision === 'allow') {
    return (command) => {
      const parsed = simpleWords(command)
      return (
        parsed !== undefined &&
        wordsMatch(
          words,
          parsed.map((word) => word.text),
          0,
          true,
        )
      )
    }
  }
  return (command) => {
    for (const piece of roughPieces(command)) {
      for (let start = 0; start < piece.length; start++) if (wordsMatch(words, piece, start, false)) return true
    }
    return false
  }
}

/** a pattern that matches exactly this command, for remembering an answer to it; undefined when it is not simple */
export function exactCommandPattern(command: string): string | undefined {
  const words = simpleWords(command)
  if (!words) return
  return words.map((word) => (/^[A-Za-z0-9_\-./:=,+@%^]+$/.test(word.text) ? word.text : `'${word.text.replaceAll("'", `'"'"'`)}'`)).join(' ')
}
