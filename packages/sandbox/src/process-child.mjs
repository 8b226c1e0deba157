// the entry of a sandbox process (the process-isolated tier): plain js, because node 20 cannot start from a .ts file.
// it registers tsx's loader, then serves runs over the ipc channel (process-serve.ts).
import { register } from 'tsx/esm/api'

register()
await import('./process-serve.ts')
