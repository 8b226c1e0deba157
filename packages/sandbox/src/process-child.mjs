// the entry of a sandbox process (the process-isolated tier): plain js, because node 20 cannot start from a .ts file.
// built (dist/), it serves runs over the ipc channel from process-serve.js on plain node; from source it first
// registers tsx's loader for process-serve.ts.
import { existsSync } from 'node:fs'

if (existsSync(new URL('./process-serve.js', import.meta.url))) {
  await import('./process-serve.js')
} else {
  const { register } = await import('tsx/esm/api')
  register()
  await import('./process-serve.ts')
}
