// `faber grants`: the operator's view of the persisted approval grants in a deployment's store. it opens the store
// directly (no deployment is started), so it works while agents run: they see a revoke on their next call.

import { readFile, writeFile } from 'node:fs/promises'
import { GrantStore, PendingQuestions } from '@faber/plugin-approval'
import { openStore, type Store, StoreError, type StoreLocation } from '@faber/store'
import { deploymentStore, loadDeploymentFile } from './deployment.ts'

export class GrantsUsageError extends Error {}

export interface GrantsOptions {
  store?: string
  deployment?: string
  json?: boolean
  replace?: boolean
  output?: string
}

export const GRANTS_HELP = `faber grants — list, revoke, export and import the approval grants kept in a deployment's store

Usage:
  faber grants list   (--store FILE|URL | --deployment FILE) [--json]
  faber grants revoke <id>... (--store FILE|URL | --deployment FILE)
  faber grants export (--store FILE|URL | --deployment FILE) [--output FILE]
  faber grants import <file.json | -> (--store FILE|URL | --deployment FILE) [--replace]
  faber grants pending (--store FILE|URL | --deployment FILE) [--json]
  faber grants answer <id> allow|reject (--store FILE|URL | --deployment FILE)

"Always" answers of @faber/plugin-approval are kept in the deployment's store (@faber/store). Running agents see
changes made here on their next call, on every host that shares the store. export writes { "version": 1, "grants": [...] }; import reads the same
(an entry with an id already stored replaces it; --replace drops the stored grants that are not in the file).

A question that has waited for a person longer than the approval plugin's grantWatchMs is kept in the store too:
pending lists them, whichever process asked, and answer decides one once (allow or reject). The process that asked
goes on within grantWatchMs; if it stopped meanwhile, the program it was part of finds the answer when the same session
is continued (faber run/chat --log), before the question expires (the approval's timeoutMs after it was asked). pending
removes the expired ones.

Options:
  --store FILE|URL    the SQLite store, or a postgres:// URL
  -d, --deployment FILE  a deployment file: its '@faber/store' plugin's path, url or urlEnv is the store
  --json              list as JSON (the export format)
  --output FILE       export to FILE instead of stdout
  --replace           import: the file becomes the whole set of grants`

async function storeLocation(options: GrantsOptions): Promise<StoreLocation> {
  if (options.store && options.deployment) throw new GrantsUsageError('faber grants: give --store or --deployment, not both')
  if (options.store) return /^postgres(ql)?:\/\//.test(options.store) ? { url: options.store } : { path: options.store }
  if (!options.deployment) throw new GrantsUsageError('faber grants: which store? pass --store FILE|URL or --deployment FILE')
  return deploymentStore(await loadDeploymentFile(options.deployment), 'this deployment keeps no grants')
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => row[column].length)))
  return rows
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
}

/** runs one `faber grants` subcommand; resolves with the exit code */
export async function grants(args: string[], options: GrantsOptions, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const [action, ...rest] = args
  if (!['list', 'revoke', 'export', 'import', 'pending', 'answer'].includes(action)) {
    throw new GrantsUsageError(
      `faber grants: expected list, revoke, export, import, pending or answer${action ? `, not "${action}"` : ''}\nRun faber grants --help for usage.`,
    )
  }
  const wanted =
    action === 'revoke'
      ? !rest.length && 'one or more grant ids'
      : action === 'import'
        ? rest.length !== 1 && 'one file (or - for stdin)'
        : action === 'answer'
          ? (rest.length !== 2 || !['allow', 'reject'].includes(rest[1])) && 'a question id and allow or reject'
          : rest.length > 0 && 'no arguments'
  if (wanted) throw new GrantsUsageError(`faber grants ${action}: expected ${wanted}\nRun faber grants --help for usage.`)
  const location = await storeLocation(options)
  let data: unknown
  if (action === 'import') {
    const source = rest[0]
    const text =
      source === '-'
        ? await readStdin()
        : await readFile(source, 'utf8').catch((error) => {
            throw new GrantsUsageError(`faber grants import: cannot read ${source} (${(error as NodeJS.ErrnoException).code ?? error})`)
          })
    try {
      data = JSON.parse(text)
    } catch (error) {
      throw new GrantsUsageError(`faber grants import: ${source} is not JSON (${(error as Error).message})`)
    }
  }
  let store: Store
  try {
    store = await openStore({ ...location, mustExist: action !== 'import' })
  } catch (error) {
    if (StoreError.isInstance(error) && action !== 'import' && /does not exist|unable to open/i.test(error.message)) {
      throw new GrantsUsageError(`faber grants: there is no store at ${error.path} (nothing has been granted there yet?)`)
    }
    throw error
  }
  try {
    const saved = new GrantStore(store)
    const questions = new PendingQuestions(store, () => saved.ready())
    switch (action) {
      case 'pending': {
        const list = await questions.list()
        if (options.json) {
          out.write(`${JSON.stringify(list, null, 2)}\n`)
          return 0
        }
        if (!list.length) {
          out.write(`no questions wait for a person in ${store.path}\n`)
          return 0
        }
        const rows = [['ID', 'TOOL', 'AGENT', 'ARGUMENTS', 'CALL', 'ASKED', 'EXPIRES', 'ANSWER']]
        for (const q of list) {
          const args = JSON.stringify(q.arguments)
          const answer = q.decision ? `${q.decision} (${q.answeredBy ?? '?'})` : '-'
          rows.push([q.id, q.tool, q.agent ?? '-', args.length > 60 ? `${args.slice(0, 59)}…` : args, q.callId, q.askedAt, q.expiresAt, answer])
        }
        out.write(`${table(rows)}\n`)
        return 0
      }
      case 'answer': {
        const [id, decision] = rest as [string, 'allow' | 'reject']
        if (await questions.answer(id, decision, 'faber grants answer')) {
          out.write(`answered ${id}: ${decision}\n`)
          return 0
        }
        const answered = await questions.get(id)
        process.stderr.write(
          answered?.decision
            ? `faber grants answer: question "${id}" was answered already (${answered.decision} by ${answered.answeredBy ?? 'someone'} at ${answered.answeredAt ?? '?'}); yours was not recorded\n`
            : answered
              ? `faber grants answer: question "${id}" expired at ${answered.expiresAt} (its approval's deadline) and was removed; yours was not recorded. The program asks again when its session is continued\n`
              : `faber grants answer: no question "${id}" waits for an answer in ${store.path} (faber grants pending lists them)\n`,
        )
        if (answered && !answered.decision) await questions.sweep()
        return 1
      }
      case 'list': {
        if (options.json) {
          out.write(`${JSON.stringify(await saved.export(), null, 2)}\n`)
          return 0
        }
        const list = await saved.read()
        if (!list.length) {
          out.write(`no grants in ${store.path}\n`)
          return 0
        }
        const rows = [['ID', 'DECISION', 'TOOL', 'AGENT', 'ARGUMENTS', 'BY', 'CREATED']]
        for (const row of list) {
          // a row another writer left that is not a grant is shown as such, so it can be revoked
          if ('unreadable' in row) {
            const { id, decision, tool, problem } = row.unreadable
            rows.push([id, String(decision), tool, '?', `UNREADABLE: ${problem}`, '-', '-'])
            continue
          }
          const g = row.grant
          const conditions = Object.entries(g.arguments ?? {}).map(([at, pattern]) => `${at}~${pattern}`)
          rows.push([g.id, g.decision, g.tool, g.agent ?? '*', conditions.join(' ') || '-', g.by ?? '-', g.createdAt || '-'])
        }
        out.write(`${table(rows)}\n`)
        return 0
      }
      case 'revoke': {
        let missing = 0
        for (const id of rest) {
          if (await saved.remove(id)) out.write(`revoked ${id}\n`)
          else {
            process.stderr.write(`faber grants revoke: no grant with id "${id}" in ${store.path}\n`)
            missing++
          }
        }
        return missing ? 1 : 0
      }
      case 'export': {
        const text = `${JSON.stringify(await saved.export(), null, 2)}\n`
        if (options.output) await writeFile(options.output, text)
        else out.write(text)
        return 0
      }
      default: {
        let count: number
        try {
          count = await saved.import(data, { replace: options.replace })
        } catch (error) {
          if (error instanceof TypeError) throw new GrantsUsageError(`faber grants import: ${error.message}; nothing was imported`)
          throw error
        }
        out.write(`imported ${count} grant${count === 1 ? '' : 's'} into ${store.path}\n`)
        return 0
      }
    }
  } finally {
    await store.close()
  }
}

async function readStdin(): Promise<string> {
  let text = ''
  for await (const chunk of process.stdin) text += chunk
  return text
}
