// the tools' own error codes. each has one meaning; the core reports a thrown FsError as TOOL_FAILED with `toolCode`.

export type FsErrorCode =
  | 'FS_NOT_FOUND' // the path does not exist
  | 'FS_NOT_A_FILE' // the path exists but is not a regular file (a directory, a socket, ...)
  | 'FS_NOT_A_DIRECTORY' // list was given something that is not a directory
  | 'FS_TOO_LARGE' // the file is over the configured size cap
  | 'FS_BINARY' // the file is not UTF-8 text
  | 'FS_OUTSIDE_ROOT' // the path, or a symlink on it, leads outside the workspace root
  | 'FS_STALE' // the file is not at the version the call expected (changed, appeared or vanished)
  | 'FS_CONFLICT' // another process changed the file while this write replaced it; its change was kept, this write not applied
  | 'FS_NO_MATCH' // edit: the old text does not occur in the file
  | 'FS_AMBIGUOUS_MATCH' // edit: the old text occurs more than once and replaceAll was not set
  | 'FS_INVALID_ARGUMENT' // arguments that pass the schema but make no sense (an empty old text, a no-op edit)
  | 'FS_INVALID_PATTERN' // grep's regular expression or glob's pattern does not compile
  | 'FS_PERMISSION_DENIED' // the operating system refused access
  | 'FS_IO' // any other operating-system error; the message carries its errno code

export const FS_ERROR_CODES: readonly FsErrorCode[] = [
  'FS_NOT_FOUND',
  'FS_NOT_A_FILE',
  'FS_NOT_A_DIRECTORY',
  'FS_TOO_LARGE',
  'FS_BINARY',
  'FS_OUTSIDE_ROOT',
  'FS_STALE',
  'FS_CONFLICT',
  'FS_NO_MATCH',
  'FS_AMBIGUOUS_MATCH',
  'FS_INVALID_ARGUMENT',
  'FS_INVALID_PATTERN',
  'FS_PERMISSION_DENIED',
  'FS_IO',
]

export class FsError extends Error {
  constructor(
    readonly code: FsErrorCode,
    message: string,
  ) {
    super(message)
    this.name = 'FsError'
  }
}

export function errnoOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

/** maps an operating-system error on `path` (shown to the model) to an FsError; FsErrors pass through */
export function fromErrno(error: unknown, path: string): FsError {
  if (error instanceof FsError) return error
  const errno = errnoOf(error)
  switch (errno) {
    case 'ENOENT':
      return new FsError('FS_NOT_FOUND', `"${path}" does not exist`)
    case 'EISDIR':
      return new FsError('FS_NOT_A_FILE', `"${path}" is a directory, not a file`)
    case 'ENOTDIR':
      return new FsError('FS_NOT_FOUND', `"${path}" does not exist (a parent of it is a file, not a directory)`)
    case 'EACCES':
    case 'EPERM':
      return new FsError('FS_PERMISSION_DENIED', `permission denied on "${path}"`)
    default:
      return new FsError('FS_IO', `${errno ?? 'error'} on "${path}": ${error instanceof Error ? error.message : String(error)}`)
  }
}
