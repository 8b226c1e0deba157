// a publish ships only what the packaging test installed and used. test/packaging.spec.ts, when every one of its tests
// passed, runs `record DIR`: the sha256 of each tarball it tested goes into node_modules/.cache/faber/packaging.json.
// each package's prepublishOnly runs `verify`: it packs the package again as pnpm publish is about to (pnpm pack is
// byte-for-byte repeatable) and refuses unless that tarball is one the test passed. a changed source, a rebuilt dist/,
// a bumped version: each is a different tarball, so the test has to pass on it first. `--ignore-scripts` skips it, as
// it skips every lifecycle script.
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { publishable, ROOT, tarballName } from './tarballs.mjs'

// FABER_PACKAGING_RECORD: another place for it (test/prepublish.spec.ts keeps a record of its own)
const RECORD = process.env.FABER_PACKAGING_RECORD ?? join(ROOT, 'node_modules/.cache/faber/packaging.json')
const sha256 = (file) => createHash('sha256').update(readFileSync(file)).digest('hex')

function record(dir) {
  const tested = {}
  for (const { name, version } of publishable()) tested[`${name}@${version}`] = sha256(join(dir, tarballName(name, version)))
  mkdirSync(dirname(RECORD), { recursive: true })
  writeFileSync(RECORD, `${JSON.stringify({ at: new Date().toISOString(), tested }, null, 2)}\n`)
}

/** why this package may not be published, or undefined when it may */
function refusal() {
  const { name, version } = JSON.parse(readFileSync('package.json', 'utf8'))
  const id = `${name}@${version}`
  // npm publish would ship package.json as it is in the workspace, `workspace:*` ranges and src/ exports included
  if (!/^pnpm\//.test(process.env.npm_config_user_agent ?? ''))
    return `${id}: npm publish would ship the workspace's package.json as it is; publish with pnpm publish, which writes the published manifest`
  let tested
  try {
    tested = JSON.parse(readFileSync(RECORD, 'utf8')).tested
  } catch {
    return `${id}: the packaging test has not passed in this workspace`
  }
  if (!tested[id]) return `${id}: the packaging test passed on other versions (${Object.keys(tested).join(', ')}), not this one`
  const temp = mkdtempSync(join(tmpdir(), 'faber-prepublish-'))
  try {
    execFileSync('pnpm', ['pack', '--pack-destination', temp], { stdio: ['ignore', 'ignore', 'inherit'] })
    if (sha256(join(temp, tarballName(name, version))) !== tested[id]) return `${id}: the package changed since the packaging test passed (its tarball differs)`
  } finally {
    rmSync(temp, { recursive: true, force: true })
  }
}

const [command, dir] = process.argv.slice(2)
if (command === 'record' && dir) record(dir)
else if (command === 'verify') {
  const why = refusal()
  if (why) {
    const retest =
      'run pnpm test test/packaging.spec.ts at the workspace root (it makes the tarballs with pnpm tarballs, installs them with npm into a fresh project and uses them), then publish again'
    process.stderr.write(`${why}${why.includes('pnpm publish') ? '' : `; ${retest}`}.\n`)
    process.exit(1)
  }
} else {
  process.stderr.write('Usage: node scripts/packaging-check.mjs record DIR | verify\n')
  process.exit(2)
}
