// the far end of bench/mix.ts's floor: a node process that answers each message on its ipc channel with itself
process.on('message', (message) => process.send(message))
process.on('disconnect', () => process.exit(0))
