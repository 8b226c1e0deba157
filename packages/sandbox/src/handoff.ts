// the hand-off's shared-memory lanes (lane.mjs, plain js because the worker's entry loads it too), for another backend
// that hands off nested calls the same way (the isolate backend's in-process drive)
export * from './lane.mjs'
