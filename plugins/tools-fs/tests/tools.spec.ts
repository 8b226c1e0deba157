import { createHash } from 'node:crypto'
import { chmod, mkdir, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { value } from '@faber/core/testing'
import { expect } from 'chai'
import { ABSENT, compileGlob, FS_ERROR_CODES } from '../src/index.ts'
import { cleanup, tempDir, toolCode, workspace } from './helpers.ts'

const sha = (text: string | Buffer) => `sha256:${createHash('sha256').update(text).digest('hex')}`

afterEach(cleanup)

describe('tools-fs: read', () => {
  it('returns numbered lines, the counts and the content hash as version', async () => {
    const { call, file } = await workspace()
    await writeFile(file('a.txt'), 'one\ntwo\r\nthree\n')
    const result = await call('read', { path: 'a.txt' })
    expect(value(result)).to.deep.equal({
      path: 'a.txt',
      version: sha('one\ntwo\r\nthree\n'),
      text: '     1\tone\n     2\ttwo\n     3\tthree',
      offset: 1,
      lines: 3,
      totalLines: 3,
      truncated: false,
    })
    expect(result.content).to.equal(`a.txt (version ${sha('one\ntwo\r\nthree\n')}, 3 lines)\n     1\tone\n     2\ttwo\n     3\tthree`)
  })

  it('reads a window with offset and limit and says how to continue', async () => {
    const { call, file } = await workspace({ readLines: 2 })
    await writeFile(file('a.txt'), 'l1\nl2\nl3\nl4\nl5')
    const first = await call('read', { path: 'a.txt' })
    expect(value(first)).to.include({ offset: 1, lines: 2, totalLines: 5, truncated: true })
    expect(first.content).to.contain('read with offset 3 to continue')
    expect(value(await call('read', { path: 'a.txt', offset: 4, limit: 10 }))).to.include({ text: '     4\tl4\n     5\tl5', truncated: false })
    expect((await call('read', { path: 'a.txt', offset: 9 })).content).to.contain('offset 9 is past the end')
  })

  it('cuts very long lines and shows an empty file as such', async () => {
    const { call, file } = await workspace({ maxLineChars: 16 })
    await writeFile(file('long.txt'), `${'x'.repeat(40)}\n`)
    await writeFile(file('empty.txt'), '')
    expect(value(await call('read', { path: 'long.txt' })).text).to.equal(`     1\t${'x'.repeat(16)}… [line cut at 16 characters]`)
    const empty = await call('read', { path: 'empty.txt' })
    expect(value(empty)).to.include({ totalLines: 0, lines: 0, version: sha('') })
    expect(empty.content).to.contain('(empty file)')
  })

  it('refuses missing files, directories, binary and oversized files with their codes', async () => {
    const { call, file } = await workspace({ maxFileBytes: 64 })
    await mkdir(file('dir'))
    await writeFile(file('nul.bin'), Buffer.from([0x61, 0x00, 0x62]))
    await writeFile(file('latin1.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9]))
    await writeFile(file('big.txt'), 'y'.repeat(65))
    const missing = await call('read', { path: 'nope.txt' })
    expect(missing.isError && missing.error.code).to.equal('TOOL_FAILED')
    expect(toolCode(missing)).to.equal('FS_NOT_FOUND')
    expect(missing.content).to.equal('Error: "read" failed: FS_NOT_FOUND: "nope.txt" does not exist')
    expect(toolCode(await call('read', { path: 'dir' }))).to.equal('FS_NOT_A_FILE')
    expect(toolCode(await call('read', { path: 'nul.bin' }))).to.equal('FS_BINARY')
    expect(toolCode(await call('read', { path: 'latin1.txt' }))).to.equal('FS_BINARY')
    const big = await call('read', { path: 'big.txt' })
    expect(toolCode(big)).to.equal('FS_TOO_LARGE')
    expect(big.content).to.contain('over the 1 KiB limit for read')
  })
})

describe('tools-fs: paths stay inside the root', () => {
  it('refuses .. and absolute paths outside, accepts absolute paths inside', async () => {
    const { call, root, file } = await workspace()
    await writeFile(file('in.txt'), 'in')
    for (const p of ['../x.txt', 'a/../../x.txt', '/etc/hostname', path.dirname(root)]) {
      const result = await call('read', { path: p })
      expect(toolCode(result), p).to.equal('FS_OUTSIDE_ROOT')
    }
    expect(toolCode(await call('write', { path: '../escape.txt', content: 'x' }))).to.equal('FS_OUTSIDE_ROOT')
    expect(value(await call('read', { path: file('in.txt') })).path).to.equal('in.txt')
    expect(value(await call('read', { path: 'sub/../in.txt' })).path).to.equal('in.txt')
  })

  it('refuses symlinks that leave the root, for reads, writes and listings, and follows those that stay', async () => {
    const { call, file } = await workspace()
    const outside = await tempDir('faber-outside-')
    await writeFile(path.join(outside, 'secret.txt'), 'secret')
    await symlink(outside, file('out'))
    await symlink(path.join(outside, 'secret.txt'), file('secret-link'))
    await symlink(path.join(outside, 'new.txt'), file('dangling'))
    await writeFile(file('real.txt'), 'real')
    await symlink('real.txt', file('alias.txt'))

    expect(toolCode(await call('read', { path: 'out/secret.txt' }))).to.equal('FS_OUTSIDE_ROOT')
    expect(toolCode(await call('read', { path: 'secret-link' }))).to.equal('FS_OUTSIDE_ROOT')
    expect(toolCode(await call('list', { path: 'out' }))).to.equal('FS_OUTSIDE_ROOT')
    expect(toolCode(await call('write', { path: 'out/planted.txt', content: 'x' }))).to.equal('FS_OUTSIDE_ROOT')
    // a dangling link is followed by hand, so a write through it cannot create a file outside
    expect(toolCode(await call('write', { path: 'dangling', content: 'x' }))).to.equal('FS_OUTSIDE_ROOT')
    expect((await readdir(outside)).sort()).to.deep.equal(['secret.txt'])
    // grep and glob do not follow links out of the root
    expect(value(await call('grep', { pattern: 'secret' })).matches).to.deep.equal([])
    expect(value(await call('glob', { pattern: '*secret*' })).matches).to.deep.equal([])

    expect(value(await call('read', { path: 'alias.txt' })).text).to.equal('     1\treal')
    // writing through an inside link changes its target and keeps the link
    value(await call('write', { path: 'alias.txt', content: 'changed' }))
    expect(await readFile(file('real.txt'), 'utf8')).to.equal('changed')
    expect((await call('list', {})).content).to.contain('alias.txt@')
  })
})

describe('tools-fs: write', () => {
  it('creates files and their directories, then replaces them atomically, keeping the mode', async () => {
    const { call, file } = await workspace()
    const created = await call('write', { path: 'deep/er/new.txt', content: 'hello\n' })
    expect(value(created)).to.deep.equal({ path: 'deep/er/new.txt', version: sha('hello\n'), created: true, bytes: 6 })
    expect(created.content).to.equal(`created deep/er/new.txt (6 bytes, version ${sha('hello\n')})`)
    await chmod(file('deep/er/new.txt'), 0o640)
    const replaced = value(await call('write', { path: 'deep/er/new.txt', content: 'bye' }))
    expect(replaced).to.include({ created: false, version: sha('bye') })
    expect(await readFile(file('deep/er/new.txt'), 'utf8')).to.equal('bye')
    expect((await stat(file('deep/er/new.txt'))).mode & 0o777).to.equal(0o640)
    expect(await readdir(file('deep/er'))).to.deep.equal(['new.txt'])
    // the version write reports is the one read sees
    expect(value(await call('read', { path: 'deep/er/new.txt' })).version).to.equal(replaced.version)
  })

  it('compare-and-swap: writes at the expected version, refuses a stale one and leaves the file alone', async () => {
    const { call, file } = await workspace()
    await writeFile(file('a.txt'), 'v1')
    const { version } = value(await call('read', { path: 'a.txt' }))
    expect(value(await call('write', { path: 'a.txt', content: 'v2', expectedVersion: version })).version).to.equal(sha('v2'))
    const stale = await call('write', { path: 'a.txt', content: 'v3', expectedVersion: version })
    expect(toolCode(stale)).to.equal('FS_STALE')
    expect(stale.content).to.contain('"a.txt" changed since you read it — read it again, then retry')
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('v2')
    expect(toolCode(await call('write', { path: 'gone.txt', content: 'x', expectedVersion: version }))).to.equal('FS_STALE')
    expect(await readdir(path.dirname(file('a.txt')))).to.deep.equal(['a.txt'])
  })

  it(`expectedVersion "${ABSENT}" only creates`, async () => {
    const { call, file } = await workspace()
    expect(value(await call('write', { path: 'n.txt', content: 'first', expectedVersion: ABSENT })).created).to.equal(true)
    const again = await call('write', { path: 'n.txt', content: 'second', expectedVersion: ABSENT })
    expect(toolCode(again)).to.equal('FS_STALE')
    expect(await readFile(file('n.txt'), 'utf8')).to.equal('first')
    expect(await readdir(path.dirname(file('n.txt')))).to.deep.equal(['n.txt'])
  })

  it('refuses to write a directory or through a file', async () => {
    const { call, file } = await workspace()
    await mkdir(file('d'))
    await writeFile(file('f'), '')
    expect(toolCode(await call('write', { path: 'd', content: 'x' }))).to.equal('FS_NOT_A_FILE')
    expect(toolCode(await call('write', { path: '.', content: 'x' }))).to.equal('FS_NOT_A_FILE')
    expect(toolCode(await call('write', { path: 'f/child.txt', content: 'x' }))).to.equal('FS_NOT_A_FILE')
  })
})

describe('tools-fs: edit', () => {
  it('replaces exactly one occurrence and reports the new version', async () => {
    const { call, file } = await workspace()
    await writeFile(file('a.ts'), 'const a = 1\nconst b = 2\n')
    const result = await call('edit', { path: 'a.ts', oldString: 'b = 2', newString: 'b = 3' })
    expect(value(result)).to.deep.equal({ path: 'a.ts', version: sha('const a = 1\nconst b = 3\n'), replacements: 1 })
    expect(await readFile(file('a.ts'), 'utf8')).to.equal('const a = 1\nconst b = 3\n')
  })

  it('says clearly when the text is missing or ambiguous, and replaces all on request', async () => {
    const { call, file } = await workspace()
    await writeFile(file('a.txt'), 'x x x')
    const none = await call('edit', { path: 'a.txt', oldString: 'y', newString: 'z' })
    expect(toolCode(none)).to.equal('FS_NO_MATCH')
    const many = await call('edit', { path: 'a.txt', oldString: 'x', newString: 'z' })
    expect(toolCode(many)).to.equal('FS_AMBIGUOUS_MATCH')
    expect(many.content).to.contain('occurs 3 times')
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('x x x')
    expect(value(await call('edit', { path: 'a.txt', oldString: 'x', newString: '$&$&', replaceAll: true })).replacements).to.equal(3)
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('$&$& $&$& $&$&')
    expect(toolCode(await call('edit', { path: 'a.txt', oldString: 'q', newString: 'q' }))).to.equal('FS_INVALID_ARGUMENT')
    expect(toolCode(await call('edit', { path: 'missing.txt', oldString: 'q', newString: 'r' }))).to.equal('FS_NOT_FOUND')
  })

  it('matches the line ends of a CRLF file and keeps them', async () => {
    const { call, file } = await workspace()
    await writeFile(file('w.txt'), 'a\r\nb\r\nc\r\n')
    value(await call('edit', { path: 'w.txt', oldString: 'a\nb', newString: 'A\nB' }))
    expect(await readFile(file('w.txt'), 'utf8')).to.equal('A\r\nB\r\nc\r\n')
  })

  it('never loses a change that lands while it runs: with no policy it is edited on top of it, or refused', async () => {
    const { ctx, call, file } = await workspace()
    await writeFile(file('a.txt'), 'base')
    // fs/expected-version is asked inside the body after the edit read the file: change the file there
    let change = 'base, and a line appended by someone else'
    ctx.on('fs/expected-version', async () => {
      await writeFile(file('a.txt'), change)
      return undefined
    })
    value(await call('edit', { path: 'a.txt', oldString: 'base', newString: 'mine' }))
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('mine, and a line appended by someone else')
    // a change that takes away what the edit replaces: the edit, done again on the new content, finds nothing
    change = 'rewritten by someone else'
    await writeFile(file('a.txt'), 'mine again')
    const result = await call('edit', { path: 'a.txt', oldString: 'mine', newString: 'ours' })
    expect(toolCode(result)).to.equal('FS_NO_MATCH')
    expect(await readFile(file('a.txt'), 'utf8')).to.equal('rewritten by someone else')
    expect(await readdir(path.dirname(file('a.txt')))).to.deep.equal(['a.txt'])
  })

  it('checks expectedVersion against the content it edits', async () => {
    const { call, file } = await workspace()
    await writeFile(file('a.txt'), 'one')
    const stale = await call('edit', { path: 'a.txt', oldString: 'one', newString: 'two', expectedVersion: sha('other') })
    expect(toolCode(stale)).to.equal('FS_STALE')
    expect(value(await call('edit', { path: 'a.txt', oldString: 'one', newString: 'two', expectedVersion: sha('one') })).version).to.equal(sha('two'))
  })
})

describe('tools-fs: list, glob, grep', () => {
  async function tree() {
    const ws = await workspace()
    const files: Record<string, string> = {
      'README.md': '# title\nTODO: docs\n',
      'src/index.ts': 'export const a = 1 // TODO\n',
      'src/util/strings.ts': 'export function pad() {}\nexport function trim() {}\n',
      'src/util/strings.test.ts': 'test("pad")\n',
      'node_modules/dep/index.ts': 'TODO in a dependency\n',
      '.git/HEAD': 'TODO\n',
      'img.png': '\u0000PNG TODO',
    }
    for (const [rel, text] of Object.entries(files)) {
      await mkdir(path.dirname(ws.file(rel)), { recursive: true })
      await writeFile(ws.file(rel), text)
    }
    return ws
  }

  it('lists a directory with types and sizes', async () => {
    const { call } = await tree()
    const listed = await call('list', { path: 'src' })
    expect(value(listed)).to.deep.equal({
      path: 'src',
      entries: [
        { name: 'index.ts', type: 'file', size: 27 },
        { name: 'util', type: 'directory' },
      ],
      truncated: false,
    })
    expect(listed.content).to.equal('src:\nindex.ts\nutil/')
    expect(toolCode(await call('list', { path: 'README.md' }))).to.equal('FS_NOT_A_DIRECTORY')
    expect(toolCode(await call('list', { path: 'none' }))).to.equal('FS_NOT_FOUND')
  })

  it('globs by name at any depth, by path with **, with braces, skipping ignored directories', async () => {
    const { call } = await tree()
    expect(value(await call('glob', { pattern: '*.ts' })).matches).to.deep.equal(['src/index.ts', 'src/util/strings.test.ts', 'src/util/strings.ts'])
    expect(value(await call('glob', { pattern: 'src/**/*.test.ts' })).matches).to.deep.equal(['src/util/strings.test.ts'])
    expect(value(await call('glob', { pattern: '**/index.ts' })).matches).to.deep.equal(['src/index.ts'])
    expect(value(await call('glob', { pattern: 'util/*.{md,ts}', path: 'src' })).matches).to.deep.equal(['src/util/strings.test.ts', 'src/util/strings.ts'])
    expect(value(await call('glob', { pattern: '*.[mp][dn]*' })).matches).to.deep.equal(['README.md', 'img.png'])
    expect(toolCode(await call('glob', { pattern: 'a{b' }))).to.equal('FS_INVALID_PATTERN')
    expect(toolCode(await call('glob', { pattern: '*', path: 'README.md' }))).to.equal('FS_NOT_A_DIRECTORY')
  })

  it('compiles globs segment-aware', () => {
    const m = compileGlob('a/*/c?.txt')
    expect([m('a/b/c1.txt'), m('a/b/x/c1.txt'), m('a/b/c12.txt')]).to.deep.equal([true, false, false])
    const deep = compileGlob('a/**/z')
    expect([deep('a/z'), deep('a/b/c/z'), deep('ab/z')]).to.deep.equal([true, true, false])
  })

  it('greps line by line with paths and numbers, filters and caps, skipping binaries and ignored directories', async () => {
    const { call } = await tree()
    const all = await call('grep', { pattern: 'TODO' })
    expect(value(all)).to.deep.equal({
      matches: [
        { path: 'README.md', line: 2, text: 'TODO: docs' },
        { path: 'src/index.ts', line: 1, text: 'export const a = 1 // TODO' },
      ],
      truncated: false,
      filesSearched: 4,
      filesSkipped: 1,
    })
    expect(all.content).to.equal('README.md:2: TODO: docs\nsrc/index.ts:1: export const a = 1 // TODO')
    expect(value(await call('grep', { pattern: '^export function \\w+', glob: '*.ts' })).matches.map((m: any) => m.line)).to.deep.equal([1, 2])
    expect(value(await call('grep', { pattern: 'todo', ignoreCase: true, path: 'src' })).matches).to.have.length(1)
    expect(value(await call('grep', { pattern: 'pad', path: 'src/util/strings.ts' })).matches).to.deep.equal([
      { path: 'src/util/strings.ts', line: 1, text: 'export function pad() {}' },
    ])
    const capped = value(await call('grep', { pattern: 'export', limit: 2 }))
    expect(capped.truncated).to.equal(true)
    expect(capped.matches.map((m: any) => `${m.path}:${m.line}`)).to.deep.equal(['src/index.ts:1', 'src/util/strings.ts:1'])
    expect(toolCode(await call('grep', { pattern: '(' }))).to.equal('FS_INVALID_PATTERN')
  })
})

describe('tools-fs: declarations', () => {
  it('marks read-only tools concurrency-safe and writers destructive, with precise SDK types', async () => {
    const { ctx, root } = await workspace()
    const args: Record<string, object> = { read: { path: 'a' }, list: {}, glob: { pattern: '*' }, grep: { pattern: 'x' } }
    for (const name of ['read', 'list', 'glob', 'grep']) {
      expect(ctx.tools.executionMode({ name, arguments: args[name] }), name).to.equal('parallel')
      expect(ctx.tools.get(name)?.annotations).to.include({ readOnly: true, fsRoot: root })
    }
    for (const name of ['write', 'edit']) {
      expect(ctx.tools.executionMode({ name, arguments: {} })).to.equal('exclusive')
      expect(ctx.tools.get(name)?.annotations).to.include({ destructive: true, fsRoot: root })
    }
    const sdk = ctx.tools.sdkDeclarations()
    expect(sdk).to.match(/version: string/)
    expect(sdk).to.match(/matches: \{[^}]*line: number/)
    expect(sdk).to.match(/type: "file" \| "directory" \| "symlink" \| "other"/)
    expect(FS_ERROR_CODES).to.include.members(['FS_NOT_FOUND', 'FS_STALE', 'FS_OUTSIDE_ROOT'])
  })

  it('refuses a root that does not exist', async () => {
    const error = await workspace({ root: '/definitely/not/here' }).catch((e) => e)
    expect(String(error)).to.contain('does not exist')
  })
})
