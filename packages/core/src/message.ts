/**
 * what a thrown value says, as text, for a log line or a result. reading it never throws in turn, whatever was thrown:
 * a value with no prototype, a Proxy whose traps throw or a revoked one, a throwing `message` getter or `toString`.
 * a message longer than `maxChars` is cut there and marked with an ellipsis
 */
export function messageOf(error: unknown, maxChars = Number.POSITIVE_INFINITY): string {
  let text: string
  try {
    text = error instanceof Error ? String(error.message) : String(error)
  } catch {
    return 'an error that could not be shown'
  }
  return text.length > maxChars ? `${text.slice(0, maxChars)}…` : text
}
