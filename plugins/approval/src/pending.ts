// the questions waiting for a person, kept in the deployment's store (table `approval_pending`, made by the grants'
// migrations): another process sharing the store sees them (`faber grants pending`) and answers them (`faber grants
// answer`). a question is written once it has waited grantWatchMs (one a rule or grant answers at once costs no write),
// and removed once decided. an answer recorded for a question of a process that stopped meanwhile is found when the
// same call of the same program of the same session asks again after a restart: its session, run_code call id, tool,
// agent and arguments match. a question without a session is never taken that way, and each expires at its approval's
// deadline: an expired one answers nothing and is swept from the store.

import { randomUUID } from 'node:crypto'
import { canonicalJson, type Json } from '@faber/core'
import type { Store } from '@faber/store'
import type { Decision } from './grants.ts'

export interface PendingQuestion {
  id: string
  /** the conversation the call was made in (a session log's id, an MCP session); absent: it is never taken after a restart */
  session?: string
  /** the call's outermost call id: the run_code call for a nested call */
  rootCallId: string
  callId: string
  tool: string
  agent?: string
  arguments: Json
  reason: string
  askedAt: string
  /** the approval's deadline: past it, the question answers nothing and leaves the store */
  expiresAt: string
  /** set once someone answered it in the store */
  decision?: Decision
  answeredBy?: string
  answeredAt?: string
}

interface Row {
  id: string
  owner: string
  session: string | null
  root_call_id: string
  call_id: string
  tool: string
  agent: string | null
  arguments: string
  reason: string
  asked_at: string
  expires_at: string | null
  decision: Decision | null
  answered_by: string | null
  answered_at: string | null
}

const COLUMNS = 'id, owner, session, root_call_id, call_id, tool, agent, arguments, reason, asked_at, expires_at, decision, answered_by, answered_at'

function fromRow(row: Row): PendingQuestion {
  let args: Json
  try {
    args = JSON.parse(row.arguments)
  } catch {
    args = row.arguments
  }
  return {
    id: row.id,
    ...(row.session === null ? {} : { session: row.session }),
    rootCallId: row.root_call_id,
    callId: row.call_id,
    tool: row.tool,
    ...(row.agent === null ? {} : { agent: row.agent }),
    arguments: args,
    reason: row.reason,
    askedAt: row.asked_at,
    // a row an older Faber wrote has no deadline: it is expired
    expiresAt: row.expires_at ?? row.asked_at,
    ...(row.decision === null ? {} : { decision: row.decision, answeredBy: row.answered_by ?? undefined, answeredAt: row.answered_at ?? undefined }),
  }
}

/** what a question of one call is known by across a restart */
const keyOf = (session: string, rootCallId: string, tool: string, agent: string | undefined, args: Json) =>
  canonicalJson([session, rootCallId, tool, agent ?? null, args])

const now = () => new Date().toISOString()

export class PendingQuestions {
  /** this process's questions are told apart from those a process that stopped left */
  private readonly owner = randomUUID()
  /** the questions other processes left, by key, as of the change mark `seen` */
  private answered = new Map<string, PendingQuestion>()
  /** who owned each of them when read: a claim takes one over only from that owner */
  private owners = new Map<string, string>()
  private seen?: number

  constructor(
    readonly store: Store,
    /** the grants' migrations, which make the table */
    private ready: () => Promise<void>,
  ) {}

  /** the table's change mark: moves when another connection commits to it (undefined: the store cannot tell) */
  mark() {
    return this.store.changeMark('approval_pending')
  }

  /**
   * the question another process left for the same call of the same program in the same session: one that stopped
   * while it was asked (a program run again after a restart asks it again), answered meanwhile or not, and not expired.
   * no session, no question: which conversation asked is unknown. read again only when the table changed
   */
  async leftBehind(session: string | undefined, rootCallId: string, tool: string, agent: string | undefined, args: Json): Promise<PendingQuestion | undefined> {
    if (session === undefined) return
    const mark = this.mark()
    if (mark === undefined || mark !== this.seen) {
      await this.sweep()
      const rows = await this.store.all<Row>(`SELECT ${COLUMNS} FROM approval_pending WHERE owner <> ? AND session IS NOT NULL`, [this.owner])
      this.answered = new Map(rows.map((row) => fromRow(row)).map((q) => [keyOf(q.session!, q.rootCallId, q.tool, q.agent, q.arguments), q]))
      this.owners = new Map(rows.map((row) => [row.id, row.owner]))
      this.seen = mark
    }
    const question = this.answered.get(keyOf(session, rootCallId, tool, agent, args))
    return question && question.expiresAt > now() ? question : undefined
  }

  /** writes a question waiting for a person until `expiresAt` (its approval's deadline); committed when this resolves */
  async ask(question: Omit<PendingQuestion, 'id' | 'askedAt' | 'decision' | 'answeredBy' | 'answeredAt'>): Promise<string> {
    await this.ready()
    const id = `q-${randomUUID().slice(0, 8)}`
    const { session, rootCallId, callId, tool, agent, reason, expiresAt } = question
    await this.store.run(
      'INSERT INTO approval_pending (id, owner, session, root_call_id, call_id, tool, agent, arguments, reason, asked_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      [id, this.owner, session ?? null, rootCallId, callId, tool, agent ?? null, canonicalJson(question.arguments), reason, now(), expiresAt],
    )
    return id
  }

  /** removes the questions past their deadline (read no more); how many */
  async sweep(): Promise<number> {
    await this.ready()
    return this.store.run('DELETE FROM approval_pending WHERE expires_at IS NULL OR expires_at <= ?', [now()])
  }

  /** the questions other processes asked that wait for an answer still (not answered, not expired), the oldest first */
  async elsewhere(): Promise<PendingQuestion[]> {
    await this.sweep()
    const rows = await this.store.all<Row>(`SELECT ${COLUMNS} FROM approval_pending WHERE owner <> ? AND decision IS NULL ORDER BY asked_at, id`, [this.owner])
    return rows.map(fromRow)
  }

  async get(id: string): Promise<PendingQuestion | undefined> {
    await this.ready()
    const row = await this.store.get<Row>(`SELECT ${COLUMNS} FROM approval_pending WHERE id = ?`, [id])
    return row && fromRow(row)
  }

  /** every question in the store not expired, the oldest first (the expired ones are swept) */
  async list(): Promise<PendingQuestion[]> {
    await this.sweep()
    return (await this.store.all<Row>(`SELECT ${COLUMNS} FROM approval_pending ORDER BY asked_at, id`)).map(fromRow)
  }

  /**
   * answers a question not answered yet and not expired; false when there is none by that id, it was answered already,
   * or its deadline passed. `expiresAt`: how long the answer is kept from now (an allow kept until the body's result)
   */
  async answer(id: string, decision: Decision, by: string, expiresAt?: string): Promise<boolean> {
    if (decision !== 'allow' && decision !== 'reject') throw new TypeError('a question is answered allow or reject')
    await this.ready()
    const at = now()
    const changed = await this.store.run(
      'UPDATE approval_pending SET decision = ?, answered_by = ?, answered_at = ?, expires_at = COALESCE(?, expires_at) WHERE id = ? AND decision IS NULL AND expires_at > ?',
      [decision, by, at, expiresAt ?? null, id, at],
    )
    return changed > 0
  }

  /**
   * makes a question left behind (found by leftBehind) this process's own, answered or not, until `expiresAt` (the new
   * request's deadline): true for exactly one taker, whichever process, since two processes running the same program
   * again must not both act on one answer; false once it expired
   */
  async claim(id: string, expiresAt: string): Promise<boolean> {
    const from = this.owners.get(id)
    if (from === undefined) return false
    await this.ready()
    const taken = await this.store.run('UPDATE approval_pending SET owner = ?, expires_at = ? WHERE id = ? AND owner = ? AND expires_at > ?', [
      this.owner,
      expiresAt,
      id,
      from,
      now(),
    ])
    for (const [key, question] of this.answered) if (question.id === id) this.answered.delete(key)
    this.owners.delete(id)
    return taken > 0
  }

  /** the question was decided: it leaves the store */
  async remove(id: string): Promise<void> {
    await this.ready()
    await this.store.run('DELETE FROM approval_pending WHERE id = ?', [id])
    for (const [key, question] of this.answered) if (question.id === id) this.answered.delete(key)
  }
}
