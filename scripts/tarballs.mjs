// `pnpm tarballs [DIR]`: builds the workspace and packs every publishable package (each one not marked private:
// packages/* and plugins/*, not the examples) into DIR (default ./tarballs). Until the packages are on npm these are
// what a project installs: `npm install DIR/*.tgz`. Tarballs of the same packages already in DIR are removed first,
// so that glob never names two versions of one package. test/packaging.spec.ts makes its tarballs with this command.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))

/** the workspace packages that are published: name, version and directory, as pnpm lists them */
export function publishable() {
  const listed = JSON.parse(execFileSync('pnpm', ['ls', '-r', '--depth', '-1', '--json'], { cwd: ROOT, encoding: 'utf8' }))
  return listed.filter((p) => !p.private).map((p) => ({ name: p.name, version: p.version, dir: p.path }))
}

/** the file name pnpm pack gives a package: @faber/plugin-guards@0.1.0 → faber-plugin-guards-0.1.0.tgz */
export const tarballName = (name, version) => `${prefix(name)}${version}.tgz`
const prefix = (name) => `${name.replace(/^@/, '').replace('/', '-')}-`

function main() {
  const args = process.argv.slice(2)
  if (args.includes('-h') || args.includes('--help') || args.length > 1) {
    process.stdout.write('Usage: pnpm tarballs [DIR]\n\nBuilds the workspace and packs each publishable package into DIR (default ./tarballs).\n')
    process.exit(args.length > 1 ? 2 : 0)
  }
  // a relative DIR is the caller's (pnpm runs the script at the root, and says where it was called in INIT_CWD)
  const out = resolve(process.env.INIT_CWD ?? process.cwd(), args[0] ?? join(ROOT, 'tarballs'))
  const packages = publishable()
  mkdirSync(out, { recursive: true })
  const stale = (file) => packages.some((p) => file.startsWith(prefix(p.name)) && /^\d+\.\d+\.\d+.*\.tgz$/.test(file.slice(prefix(p.name).length)))
  for (const file of readdirSync(out)) if (stale(file)) rmSync(join(out, file))
  execFileSync('pnpm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] })
  const filters = packages.flatMap((p) => ['--filter', p.name])
  execFileSync('pnpm', ['-r', ...filters, 'pack', '--pack-destination', out], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] })
  const files = packages.map((p) => tarballName(p.name, p.version))
  const missing = files.filter((file) => !existsSync(join(out, file)))
  if (missing.length) throw new Error(`pnpm pack did not write ${missing.join(', ')} into ${out}`)
  process.stdout.write(`${files.length} tarballs in ${out}:\n${files.map((f) => `  ${f}\n`).join('')}`)
  process.stdout.write(`install them into a project (all of them: they depend on each other by version):\n  npm install ${out}/*.tgz\n`)
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main()
