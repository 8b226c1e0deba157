#!/usr/bin/env node
// node 20 cannot load a .ts entry by itself: register tsx's loader, then run the CLI
import { register } from 'tsx/esm/api'

register()
await import('../src/main.ts')
