// a publish ships only what the packaging test passed on: each package's prepublishOnly (scripts/packaging-check.mjs
// verify, described in the root README's "From npm") refuses a tarball the test has not recorded, or that changed since.
// run through the real `pnpm publish --dry-run` of one package, against a record of this spec's own.

import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect } from 'chai'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const CORE = join(ROOT, 'packages/core')

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number; output: string }>((resolve) => {
    execFile(command, args, { cwd, env, timeout: 240_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, output: `${stdout}${stderr}` }),
    )
  })
}

describe('publishing (prepublishOnly)', function () {
  this.timeout(300_000)
  let temp: string
  afterEach(() => rm(temp, { recursive: true, force: true }))

  it('refuses a tarball the packaging test did not pass on, and npm publish; allows the one it did', async () => {
    temp = await mkdtemp(join(tmpdir(), 'faber-prepublish-'))
    const record = join(temp, 'packaging.json')
    // a user's shell: none of the npm_* settings of the pnpm running this test (npm would take pnpm's user agent)
    const env = { ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key))), FABER_PACKAGING_RECORD: record }
    const publish = () => run('pnpm', ['publish', '--dry-run', '--no-git-checks'], CORE, env)
    const { version } = JSON.parse(await readFile(join(CORE, 'package.json'), 'utf8'))
    const id = `@faber/core@${version}`

    const none = await publish()
    expect(none.code).to.not.equal(0)
    expect(none.output).to.include(`${id}: the packaging test has not passed in this workspace`)

    // what the packaging spec writes when all of its tests passed on the tarballs of `pnpm tarballs`
    const tarballs = join(temp, 'tarballs')
    expect((await run('pnpm', ['tarballs', tarballs], ROOT, env)).code).to.equal(0)
    expect((await run(process.execPath, ['scripts/packaging-check.mjs', 'record', tarballs], ROOT, env)).code).to.equal(0)
    const passed = await publish()
    expect(passed.code, passed.output).to.equal(0)
    expect(passed.output).to.include(`Skip publishing ${id} (dry run)`)

    const recorded = JSON.parse(await readFile(record, 'utf8'))
    recorded.tested[id] = '0'.repeat(64)
    await writeFile(record, JSON.stringify(recorded))
    const changed = await publish()
    expect(changed.code).to.not.equal(0)
    expect(changed.output).to.include(`${id}: the package changed since the packaging test passed`)

    delete recorded.tested[id]
    await writeFile(record, JSON.stringify(recorded))
    expect((await publish()).output).to.include(`${id}: the packaging test passed on other versions`)

    const npm = await run('npm', ['publish', '--dry-run'], CORE, env)
    expect(npm.code).to.not.equal(0)
    expect(npm.output).to.include(`${id}: npm publish would ship the workspace's package.json as it is; publish with pnpm publish`)
  })
})
