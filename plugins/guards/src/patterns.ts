// tool-name patterns: `*` matches any run of characters (none included), `?` exactly one; everything else is literal.

export function globToRegExp(pattern: string): RegExp {
  if (typeof pattern !== 'string' || !pattern) throw new TypeError(`a tool pattern must be a non-empty string, got ${JSON.stringify(pattern)}`)
  const source = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.')
  return new RegExp(`^${source}$`)
}

/** a predicate over tool names that matches when any of the patterns does */
export function nameMatcher(patterns: readonly string[]): (name: string) => boolean {
  const compiled = patterns.map(globToRegExp)
  return (name) => compiled.some((pattern) => pattern.test(name))
}
