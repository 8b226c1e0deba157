// the Faber inspector's page: plain JavaScript, no build step. it reads /api/report (plugins, services, agents)
// and follows /api/events (server-sent events: calls, programs, approvals). every value from the deployment is
// put in the page as text, never as markup.

const token = new URLSearchParams(location.search).get('token')
const withToken = (path) => (token ? `${path}?token=${encodeURIComponent(token)}` : path)
const MAX_ROOTS = 300
// a program may make thousands of calls: the page keeps and draws the first of them, and counts the rest
const MAX_CHILDREN = 500

/** builds an element: h('div', { class: 'x', onclick }, child, 'text', [more]) */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag)
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value)
    else if (key === 'class') el.className = value
    else el.setAttribute(key, value === true ? '' : String(value))
  }
  const add = (child) => {
    if (child === undefined || child === null || child === false) return
    if (Array.isArray(child)) child.forEach(add)
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
  children.forEach(add)
  return el
}

const $ = (id) => document.getElementById(id)
const json = (value) => JSON.stringify(value, null, 2)
const ms = (value) => (value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(1)} ms`)
const time = (epoch) => new Date(epoch).toLocaleTimeString()
const agentLabel = (agent) => (agent === null || agent === undefined ? 'global' : agent)
const keyOf = (agent, callId) => `${agent ?? ''}/${callId}`

// ---- a replay report (faber replay --web): the calls whose decision changed, and the summary ----

const VERDICT_CLASS = { allow: 'ok', deny: 'bad', ask: 'warn', unknown: 'warn', error: 'muted' }

function verdictBadge(decision) {
  return h('span', { class: `badge ${VERDICT_CLASS[decision.verdict] ?? 'muted'}` }, decision.verdict)
}

function replayChange(change) {
  const by = change.new.stage ? ` by ${change.new.stage}${change.new.plugin && change.new.plugin !== change.new.stage ? ` (${change.new.plugin})` : ''}` : ''
  const where = change.within
    ? `in run_code ${change.within.callId}${change.within.line !== undefined ? `, line ${change.within.line}${change.within.source ? `: ${change.within.source}` : ''}` : ''}`
    : ''
  return h(
    'div',
    { class: 'replay-change' },
    h('div', {}, h('strong', {}, change.name), ' ', h('code', {}, change.arguments)),
    h('div', {}, verdictBadge(change.old), ' → ', verdictBadge(change.new), by),
    change.new.reason && h('div', { class: 'muted small' }, change.new.reason),
    h(
      'div',
      { class: 'muted small' },
      `session ${change.session} · turn ${change.turn}${change.agent ? ` · agent ${change.agent}` : ''}${where ? ` · ${where}` : ''}`,
    ),
    change.notReached ? h('div', { class: 'small' }, `its ${change.notReached} recorded nested call(s) would not be reached`) : null,
  )
}

async function loadReplay() {
  const res = await fetch(withToken('/api/replay'))
  if (res.status === 404) return
  if (!res.ok) throw new Error(`${res.status} ${(await res.json().catch(() => ({}))).error ?? res.statusText}`)
  const replay = await res.json()
  const s = replay.summary
  const parts = [`${s.replayed} replayed`, `${s.unchanged} unchanged`]
  if (s.newlyDenied) parts.push(`${s.newlyDenied} newly denied`)
  if (s.newlyAllowed) parts.push(`${s.newlyAllowed} newly allowed`)
  if (s.newlyAsked) parts.push(`${s.newlyAsked} newly asked`)
  if (s.unknown) parts.push(`${s.unknown} unknown`)
  $('replay-summary').replaceChildren(
    `${parts.join(', ')} — through ${replay.deployment}. `,
    h('strong', {}, replay.morePermissive ? 'More permissive: a call that was denied or asked would now run.' : 'Nothing became more permissive.'),
  )
  $('replay').replaceChildren(...(replay.changes.length ? replay.changes.map(replayChange) : [h('p', { class: 'muted' }, 'no decision changed')]))
  $('replay-panel').hidden = false
}

// ---- the report: plugins, services, agents ----

let report

async function loadReport() {
  const res = await fetch(withToken('/api/report'))
  if (!res.ok) throw new Error(`${res.status} ${(await res.json().catch(() => ({}))).error ?? res.statusText}`)
  report = await res.json()
  renderPlugins(report.report)
  renderServices(report.report)
  renderEvents(report.report)
  renderAgents(report)
  renderAnswerer(report.answerer)
}

function pluginNode(node) {
  const label = h(
    'div',
    { class: 'node' },
    h('span', { class: 'mono' }, node.name),
    h('span', { class: `badge state-${node.state}` }, node.state),
    node.agent && h('span', { class: 'badge info' }, `on agent ${node.agent}`),
    node.reusable && h('span', { class: 'badge muted' }, 'reusable'),
    node.waitingFor && h('span', { class: 'note' }, `waiting for ${node.waitingFor.join(', ')}`),
  )
  const config =
    node.config !== undefined && node.config !== null && !(typeof node.config === 'object' && Object.keys(node.config).length === 0)
      ? h('details', { class: 'config' }, h('summary', {}, 'config'), h('pre', {}, json(node.config)))
      : null
  return h(
    'li',
    { 'data-plugin': node.name, 'data-state': node.state },
    label,
    node.error && h('div', { class: 'error' }, `start error: ${node.error}`),
    config,
    node.children.length ? h('ul', {}, node.children.map(pluginNode)) : null,
  )
}

function renderPlugins(r) {
  $('plugins').replaceChildren(h('ul', {}, r.plugins.children.map(pluginNode)))
  $('inactive').replaceChildren(
    ...(r.deployment.inForce
      ? []
      : [h('p', { class: 'error' }, 'DEPLOYMENT NOT IN FORCE: no tool runs; every call ends as DEPLOYMENT_FAILED until these are fixed or disposed')]),
    ...r.deployment.faults.map((fault) =>
      h('p', { class: 'error' }, `${fault.essential ? 'NOT IN FORCE' : 'NON-ESSENTIAL, NOT IN FORCE'}: ${fault.plugin} (${fault.state}): ${fault.reason}`),
    ),
    ...r.inactive.map((entry) =>
      h(
        'p',
        { class: 'error' },
        `NOT ACTIVE: ${entry.name}${entry.agent ? ` (on agent ${entry.agent})` : ''}: ${entry.reason} — nothing it enforces is in force`,
      ),
    ),
  )
  $('disposed').replaceChildren(
    r.disposed.length
      ? h(
          'details',
          {},
          h('summary', { class: 'muted' }, `recently disposed (${r.disposed.length})`),
          h(
            'ul',
            {},
            r.disposed.map((d) => h('li', {}, `${d.name} (loaded by ${d.loadedBy}${d.agent ? `, agent ${d.agent}` : ''}) at ${d.at}`)),
          ),
        )
      : '',
  )
}

function renderServices(r) {
  $('services').replaceChildren(
    h(
      'table',
      {},
      h('thead', {}, h('tr', {}, h('th', {}, 'service'), h('th', {}, 'provided by'), h('th', {}, 'notes'))),
      h(
        'tbody',
        {},
        r.services.map((s) =>
          h(
            'tr',
            { 'data-service': s.name },
            h('td', { class: 'mono' }, s.name),
            h('td', {}, s.provider),
            h(
              'td',
              { class: 'muted' },
              [
                s.agent && `agent ${s.agent}`,
                s.isolated && 'isolated',
                s.load &&
                  `${s.load.backend}: ${s.load.running}/${s.load.maxConcurrent} running, ${s.load.queued} queued (peak ${s.load.peakRunning}/${s.load.peakQueued})`,
                s.load?.waiting &&
                  `${s.load.waiting.waiting}/${s.load.waiting.maxWaiting} waiting on a person (peak ${s.load.waiting.peakWaiting}; ${s.load.waiting.refused} refused a stopped clock), each holding its sandbox unit; ${s.load.waiting.checkpointed} checkpointed, holding none`,
              ]
                .filter(Boolean)
                .join('; '),
            ),
          ),
        ),
      ),
    ),
  )
}

function renderEvents(r) {
  // cordis' own internal/* events are noise for an operator
  const events = r.events.filter((e) => !e.event.startsWith('internal/'))
  $('events').replaceChildren(
    h(
      'details',
      {},
      h('summary', { class: 'muted' }, `${events.length} events, in dispatch order`),
      h(
        'ul',
        {},
        events.map((e) =>
          h(
            'li',
            { 'data-event': e.event },
            h('span', { class: 'mono' }, e.event),
            ': ',
            e.listeners.map((l) => `${l.plugin}${l.agent ? ` (agent ${l.agent})` : ''}${l.prepend ? ' (prepended)' : ''}`).join(', '),
          ),
        ),
      ),
    ),
  )
}

const MODE_FROM = { default: 'the deployment default', self: "this agent's presentAs" }

function chips(names, cls) {
  return names.length
    ? h(
        'div',
        { class: 'chips' },
        names.map((name) => h('span', { class: `chip ${cls ?? ''}` }, name)),
      )
    : h('p', { class: 'muted' }, 'none')
}

function layerView(tools, text, agent) {
  const from = tools.modeFrom === 'ancestor' ? `ancestor ${tools.modeAgent}'s presentAs` : MODE_FROM[tools.modeFrom]
  const name = agentLabel(tools.agent)
  const sdk = text.sections.find((s) => s.id === 'tools:sdk')
  return h(
    'details',
    { class: 'layer', 'data-layer': name, open: tools.agent !== null || report.report.tools.length === 1 },
    h('summary', {}, `${tools.agent === null ? 'global layer' : `agent ${name}`} — mode ${tools.mode} `, h('span', { class: 'muted small' }, `(${from})`)),
    agent && h('p', { class: 'muted small' }, `chain: ${agent.chain.join(' → ')}; created by ${agent.createdBy}`),
    h('h3', {}, `visible tools (${tools.visible.length})`),
    h(
      'ul',
      { class: 'visible' },
      tools.visible.map((t) =>
        h(
          'li',
          { 'data-tool': t.name },
          h('span', { class: 'mono' }, t.name),
          h('span', { class: 'muted small' }, ` ${t.owner} · ${t.plugin}`),
          t.status && h('div', { class: 'note small' }, t.status),
        ),
      ),
    ),
    h('h3', {}, `shown to the model — wire (${text.wire.length})`),
    text.wire.map((w) =>
      h(
        'details',
        { class: 'wire' },
        h('summary', {}, h('span', { class: 'chip wire' }, w.name), ' ', h('span', { class: 'muted small' }, w.description)),
        h('pre', {}, json(w.parameters)),
      ),
    ),
    h('h3', {}, 'collapsed for direct calls (reach them inside run_code)'),
    chips(tools.collapsed, 'collapsed'),
    tools.masks.length || tools.masked.length || tools.shadows.length
      ? [
          h('h3', {}, 'masks and shadows'),
          h(
            'ul',
            {},
            tools.masks.map((m) => h('li', {}, `mask by ${m.plugin} on ${m.agent}: ${m.allow ? `allow ${m.allow.join(', ')}` : `deny ${m.deny.join(', ')}`}`)),
            tools.masked.map((m) => h('li', {}, `${m.name} masked by ${m.by}`)),
            tools.shadows.map((s) => h('li', {}, `${s.name} shadows ${s.hidden}${s.by ? ` (by ${s.by})` : ''}`)),
          ),
        ]
      : null,
    h('h3', {}, 'prompt sections'),
    text.sections.length
      ? text.sections.filter((s) => s !== sdk).map((s) => h('details', {}, h('summary', { class: 'mono' }, s.id), h('pre', {}, s.text)))
      : h('p', { class: 'muted' }, 'none'),
    sdk && h('details', { class: 'sdk' }, h('summary', {}, 'SDK (what the model reads in code mode)'), h('pre', {}, sdk.text)),
  )
}

function renderAgents(view) {
  const agents = new Map(view.report.agents.map((a) => [a.name, a]))
  $('agents').replaceChildren(
    ...view.report.tools.map((tools) => layerView(tools, view.layers[tools.agent ?? ''] ?? { wire: [], sections: [] }, agents.get(tools.agent))),
  )
}

function renderAnswerer(answerer) {
  const el = $('answerer')
  el.textContent = answerer.enabled ? 'web answerer on: approvals can be answered here' : 'no web answerer: approvals are shown, answered elsewhere'
  el.className = `badge ${answerer.enabled ? 'ok' : 'muted'}`
}

// ---- the live stream ----

const calls = new Map() // key -> { key, start, record, children: Set<key>, el }
const programs = new Map() // key -> { code, description }
const approvals = new Map() // id -> approval
let rootOrder = [] // keys of top-level calls, oldest first

function entry(key) {
  let e = calls.get(key)
  if (!e) calls.set(key, (e = { key, children: new Set() }))
  return e
}

function info(e) {
  // what is known of a call: its record when it ended, else its start
  return e.record ?? e.start
}

function parentKey(call) {
  return call.nested && call.outerCallId ? keyOf(call.agent, call.outerCallId) : undefined
}

const DROPPED = Symbol('dropped')

function attach(e, call) {
  const parent = parentKey(call)
  if (parent) {
    const p = entry(parent)
    if (!p.children.has(e.key)) {
      if (p.children.size >= MAX_CHILDREN) {
        ;(p.dropped ??= new Set()).add(e.key)
        calls.delete(e.key)
        return DROPPED
      }
      p.children.add(e.key)
    }
    return p
  }
  if (!rootOrder.includes(e.key)) {
    rootOrder.push(e.key)
    if (rootOrder.length > MAX_ROOTS) forget(rootOrder.shift())
  }
}

function forget(key) {
  const e = calls.get(key)
  if (!e) return
  for (const child of e.children) forget(child)
  e.el?.remove()
  calls.delete(key)
  programs.delete(key)
}

function stateOf(e) {
  if (e.record) return e.record.outcome === 'ok' ? 'ok' : 'error'
  const call = e.start
  for (const a of approvals.values()) if (a.callId === call.callId && a.agent === call.agent) return 'waiting'
  // a program waits while one of its nested calls does
  for (const child of e.children) if (calls.has(child) && !calls.get(child).record && stateOf(calls.get(child)) === 'waiting') return 'waiting'
  return 'running'
}

function outcomeBadge(e) {
  const state = stateOf(e)
  if (state === 'ok') return h('span', { class: 'badge ok' }, 'ok')
  if (state === 'running') return h('span', { class: 'badge info' }, 'running…')
  if (state === 'waiting') return h('span', { class: 'badge warn' }, 'waiting for approval')
  const err = e.record.error
  const who = err.deniedBy ?? err.withheldBy
  const by = who ? ` by ${who.stage}/${who.plugin}` : ''
  return h('span', { class: 'badge bad' }, `${err.code}${by}`)
}

function stagesTable(record) {
  if (!record.stages.length)
    return h('p', { class: 'muted small' }, record.reachedPolicy ? 'no policy decision (default allow)' : (record.note ?? 'ended before policy'))
  return h(
    'table',
    { class: 'stages' },
    h('thead', {}, h('tr', {}, h('th', {}, 'stage'), h('th', {}, 'decision'), h('th', {}, 'by'), h('th', {}, 'why'))),
    h(
      'tbody',
      {},
      record.stages.map((s) =>
        h(
          'tr',
          {},
          h('td', {}, s.stage),
          h('td', { class: `decision-${s.decision}` }, s.decision),
          h('td', {}, s.by ?? ''),
          h('td', { class: 'reason' }, s.reason ?? ''),
        ),
      ),
    ),
  )
}

/** the index of the program's line that made a nested call: the sandbox reports where each call was made */
function callLine(lines, call) {
  const line = call.site?.line
  return Number.isInteger(line) && line >= 1 && line <= lines.length ? line - 1 : undefined
}

function sourceView(program, children) {
  const lines = program.code.split('\n')
  const marks = new Map() // line -> labels
  children.forEach((child, index) => {
    const line = callLine(lines, child)
    if (line === undefined) return
    if (!marks.has(line)) marks.set(line, [])
    marks.get(line).push(`#${index + 1}`)
  })
  return h(
    'ol',
    { class: 'source', 'aria-label': 'program source; the lines that made nested calls are highlighted' },
    lines.map((line, i) =>
      h(
        'li',
        { class: marks.has(i) ? 'hit' : undefined, 'data-line': i + 1 },
        marks.has(i) && h('span', { class: 'marks' }, marks.get(i).join(' ')),
        line || ' ',
      ),
    ),
  )
}

function focusLine(el, program, call, on) {
  const source = el.querySelector(':scope > .body ol.source')
  if (!source) return
  const line = callLine(program.code.split('\n'), call)
  if (line !== undefined) source.children[line]?.classList.toggle('focus', on)
}

function callBody(e, children) {
  const call = info(e)
  const record = e.record
  const program = programs.get(e.key)
  const parts = []
  if (program) {
    parts.push(h('p', {}, h('strong', {}, 'program: '), program.description || h('span', { class: 'muted' }, '(no description)')))
    parts.push(
      sourceView(
        program,
        children.map((c) => info(c)),
      ),
    )
  } else if (call.arguments) {
    parts.push(h('div', { class: 'small muted' }, 'arguments'), h('pre', { class: 'args' }, call.arguments))
  }
  if (record) {
    parts.push(stagesTable(record))
    if (record.error)
      parts.push(
        h(
          'p',
          { class: 'error' },
          `${record.error.code}${record.error.deniedBy ? ` (denied by ${record.error.deniedBy.stage}/${record.error.deniedBy.plugin})` : ''}${record.error.withheldBy ? ` (the tool ran; result withheld by ${record.error.withheldBy.stage}/${record.error.withheldBy.plugin})` : ''}: ${record.error.message}`,
        ),
      )
  }
  const dropped = e.dropped?.size ?? 0
  if (children.length) {
    parts.push(h('h3', {}, `nested calls (${children.length + dropped})`))
    if (dropped) parts.push(h('p', { class: 'note small dropped' }, `${dropped} more nested calls are not shown: the page keeps the first ${MAX_CHILDREN}`))
    const list = h('div', { class: 'children' })
    for (const child of children) {
      const el = callElement(child)
      if (program) {
        const nested = info(child)
        el.addEventListener('mouseenter', () => focusLine(e.el, program, nested, true))
        el.addEventListener('mouseleave', () => focusLine(e.el, program, nested, false))
        el.addEventListener('focusin', () => focusLine(e.el, program, nested, true))
        el.addEventListener('focusout', () => focusLine(e.el, program, nested, false))
      }
      list.append(el)
    }
    parts.push(list)
  }
  return h('div', { class: 'body' }, parts)
}

function callSummary(e) {
  const call = info(e)
  const record = e.record
  return h(
    'summary',
    {},
    outcomeBadge(e),
    h('span', { class: 'name' }, call.name),
    h('span', { class: 'muted small' }, `[${call.callId}]`),
    call.site && h('span', { class: 'muted small site' }, `line ${call.site.line}, column ${call.site.column}`),
    call.agent !== null && h('span', { class: 'badge info' }, call.agent),
    record ? h('span', { class: 'small' }, ms(record.durationMs)) : null,
    h('span', { class: 'muted small' }, time(record?.startedAt ?? call.startedAt)),
    record?.error?.deniedBy && h('span', { class: 'small error' }, record.stages.find((s) => s.reason && s.decision !== 'allow')?.reason ?? ''),
  )
}

function callElement(e) {
  const call = info(e)
  const children = [...e.children].map((k) => calls.get(k)).filter((c) => c && info(c))
  children.sort((a, b) => (info(a).startedAt ?? 0) - (info(b).startedAt ?? 0) || (a.record?.seq ?? 0) - (b.record?.seq ?? 0))
  const open = e.el ? e.el.open : false
  const el = h('details', { class: `call ${stateOf(e)}`, 'data-call': e.key, 'data-name': call.name, open }, callSummary(e), callBody(e, children))
  e.el?.replaceWith(el)
  e.el = el
  return el
}

/** redraws keep the keyboard focus: on a call's summary, or on an approval's button */
function keepFocus(redraw) {
  const active = document.activeElement
  let selector
  const call = active?.closest?.('[data-call]')
  const approval = active?.closest?.('[data-approval]')
  if (call && active.tagName === 'SUMMARY') selector = `[data-call="${CSS.escape(call.dataset.call)}"] > summary`
  else if (approval && active.dataset.answer) selector = `[data-approval="${CSS.escape(approval.dataset.approval)}"] [data-answer="${active.dataset.answer}"]`
  redraw()
  if (selector && !active.isConnected) document.querySelector(selector)?.focus()
}

// events come in bursts (a program's thousands of nested calls): the page draws what changed at most every 100 ms,
// in an animation frame (none while the tab is hidden)
const dirty = new Set()
// biome-ignore lint/correctness/noUnusedVariables: read by ??= in render, which biome does not count as a read
let frame

function render(key) {
  dirty.add(key)
  frame ??= setTimeout(() => requestAnimationFrame(flush), 100)
}

function rootOf(key) {
  let e = calls.get(key)
  while (e && info(e)) {
    const parent = parentKey(info(e))
    if (!parent || !calls.has(parent)) break
    key = parent
    e = calls.get(key)
  }
  return key
}

function flush() {
  frame = undefined
  const roots = new Set([...dirty].map(rootOf))
  dirty.clear()
  keepFocus(() => roots.forEach(draw))
}

function draw(key) {
  const e = calls.get(key)
  if (!e || !info(e)) return
  const parent = parentKey(info(e))
  // a nested call is drawn inside its program, which always starts (or ends) before the page could draw it alone
  if (parent) return calls.get(parent) && info(calls.get(parent)) ? draw(parent) : undefined
  const fresh = !e.el
  const el = callElement(e)
  if (fresh || !el.isConnected) {
    $('no-calls')?.remove()
    $('calls').prepend(el)
  }
  applyFilter(el)
}

function applyFilter(el) {
  const text = $('filter').value.trim().toLowerCase()
  el.classList.toggle('hidden', text !== '' && !el.textContent.toLowerCase().includes(text))
}

function onStart(call, program) {
  if (program) programs.set(program.key, program)
  const e = entry(keyOf(call.agent, call.callId))
  e.start = call
  render(attach(e, call) === DROPPED ? parentKey(call) : e.key)
}

function onCall(record) {
  const e = entry(keyOf(record.agent, record.callId))
  e.record = record
  render(attach(e, record) === DROPPED ? parentKey(record) : e.key)
}

// ---- approvals ----

const recentDecisions = []

function approvalView(a) {
  const actions = a.answerable
    ? h(
        'div',
        { class: 'actions' },
        h('button', { class: 'allow', type: 'button', 'data-answer': 'allow', onclick: () => answer(a.id, 'allow', 'once') }, 'Allow once'),
        report?.answerer.remember.includes('session') &&
          h('button', { class: 'allow', type: 'button', 'data-answer': 'session', onclick: () => answer(a.id, 'allow', 'session') }, 'Allow for this session'),
        report?.answerer.remember.includes('always') &&
          h('button', { class: 'allow', type: 'button', 'data-answer': 'always', onclick: () => answer(a.id, 'allow', 'always') }, 'Always allow'),
        h('button', { class: 'reject', type: 'button', 'data-answer': 'reject', onclick: () => answer(a.id, 'reject', 'once') }, 'Reject'),
      )
    : h('p', { class: 'muted small' }, 'waiting for another answerer (this page answers only requests the web answerer holds)')
  return h(
    'div',
    { class: 'approval', 'data-approval': a.id, role: 'group', 'aria-label': `approval for ${a.tool}` },
    h(
      'div',
      {},
      h('strong', { class: 'mono' }, a.tool),
      ` asked by ${agentLabel(a.agent)} [${a.callId}]${a.nested ? ' inside run_code' : ''} `,
      h('span', { class: 'muted small' }, time(a.askedAt)),
    ),
    h('div', { class: 'note' }, a.reason),
    h('pre', { class: 'args' }, a.arguments),
    a.program && h('details', {}, h('summary', {}, 'the program'), h('pre', {}, a.program)),
    actions,
    h('p', { class: 'error small', hidden: true }),
  )
}

function renderApprovals() {
  const list = [...approvals.values()]
  const count = $('approval-count')
  count.textContent = String(list.length)
  count.classList.toggle('zero', list.length === 0)
  keepFocus(() => $('approvals').replaceChildren(...(list.length ? list.map(approvalView) : [h('p', { class: 'muted' }, 'none waiting')])))
  $('decisions').replaceChildren(
    ...recentDecisions.map((d) => h('p', { class: 'decided' }, `${d.id}: ${d.outcome} by ${d.answeredBy}${d.note ? ` — ${d.note}` : ''}`)),
  )
}

function refreshCallOf(a) {
  const key = keyOf(a.agent, a.callId)
  if (calls.has(key)) render(key)
}

/** posts an answer from the element `el` (its buttons off meanwhile); true once taken, else the element says why */
async function post(el, path, body) {
  const buttons = el ? [...el.querySelectorAll('button')] : []
  for (const b of buttons) b.disabled = true
  let problem
  try {
    const res = await fetch(withToken(path), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { 'x-faber-token': token } : {}) },
      body: JSON.stringify(body),
    })
    if (!res.ok) problem = (await res.json().catch(() => ({}))).error ?? `${res.status} ${res.statusText}`
  } catch (error) {
    problem = `the answer did not reach the deployment: ${error.message}`
  }
  if (problem && el?.isConnected) {
    const line = el.querySelector('.error')
    line.hidden = false
    line.textContent = problem
    for (const b of buttons) b.disabled = false
  }
  return !problem
}

function answer(id, decision, remember) {
  // on success the approval leaves the page when the service reports its decision
  const el = document.querySelector(`[data-approval="${CSS.escape(id)}"]`)
  return post(el, `/api/approvals/${encodeURIComponent(id)}`, { decision, remember })
}

// ---- questions other processes sharing the store left waiting (faber run at a terminal nobody watches, one stopped) ----

let questions = []

function questionView(q) {
  return h(
    'div',
    { class: 'approval', 'data-question': q.id, role: 'group', 'aria-label': `question for ${q.tool}` },
    h(
      'div',
      {},
      h('strong', { class: 'mono' }, q.tool),
      ` asked by another process${q.agent ? ` for ${q.agent}` : ''} [${q.callId}] `,
      h('span', { class: 'muted small' }, `expires ${q.expiresAt}`),
    ),
    h('div', { class: 'note' }, q.reason),
    h('pre', { class: 'args' }, JSON.stringify(q.arguments, null, 2)),
    h(
      'div',
      { class: 'actions' },
      h('button', { class: 'allow', type: 'button', 'data-answer': 'allow', onclick: () => answerQuestion(q.id, 'allow') }, 'Allow'),
      h('button', { class: 'reject', type: 'button', 'data-answer': 'reject', onclick: () => answerQuestion(q.id, 'reject') }, 'Reject'),
    ),
    h('p', { class: 'error small', hidden: true }),
  )
}

function renderQuestions() {
  $('questions-panel').hidden = questions.length === 0
  $('question-count').textContent = String(questions.length)
  keepFocus(() => $('questions').replaceChildren(...questions.map(questionView)))
}

/** read again every few seconds: other processes do not stream to this page */
async function loadQuestions() {
  if (!report?.answerer.enabled) return
  const res = await fetch(withToken('/api/questions'))
  if (!res.ok) return
  const next = (await res.json()).questions
  if (JSON.stringify(next) === JSON.stringify(questions)) return
  questions = next
  renderQuestions()
}

async function answerQuestion(id, decision) {
  const el = document.querySelector(`[data-question="${CSS.escape(id)}"]`)
  if (await post(el, `/api/questions/${encodeURIComponent(id)}`, { decision })) await loadQuestions()
}

// ---- wiring ----

function setStatus(text, cls) {
  const el = $('status')
  el.textContent = text
  el.className = `badge ${cls}`
}

function connect() {
  const source = new EventSource(withToken('/api/events'))
  const on = (type, handle) => source.addEventListener(type, (event) => handle(JSON.parse(event.data)))
  let lagged
  // the server skipped events this page read too slowly; a fresh snapshot follows
  on('lagged', (e) => {
    lagged = e
  })
  on('snapshot', (snap) => {
    calls.clear()
    programs.clear()
    approvals.clear()
    dirty.clear()
    rootOrder = []
    $('calls').replaceChildren(h('p', { class: 'muted', id: 'no-calls' }, 'no calls yet'))
    for (const p of snap.programs) programs.set(p.key, p)
    for (const a of snap.approvals) approvals.set(a.id, a)
    for (const c of snap.running) onStart(c)
    for (const r of snap.calls) onCall(r)
    renderApprovals()
    if (lagged) setStatus(`live (caught up: ${lagged.skipped} events were skipped while this page was behind)`, 'ok')
    else setStatus('live', 'ok')
    lagged = undefined
  })
  on('start', (e) => onStart(e.call, e.program))
  on('call', (e) => onCall(e.call))
  on('approval', (e) => {
    approvals.set(e.approval.id, e.approval)
    renderApprovals()
    refreshCallOf(e.approval)
  })
  on('answerable', (e) => {
    const a = approvals.get(e.id)
    if (!a) return
    a.answerable = e.answerable
    renderApprovals()
  })
  on('decided', (e) => {
    const a = approvals.get(e.id)
    approvals.delete(e.id)
    recentDecisions.unshift(e)
    recentDecisions.splice(8)
    renderApprovals()
    if (a) refreshCallOf(a)
  })
  on('report', () => loadReport().catch(showError))
  source.onerror = () => setStatus(source.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting…', 'bad')
}

function showError(error) {
  setStatus(`error: ${error.message}`, 'bad')
}

document.addEventListener('keydown', (event) => {
  const typing = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement
  if (event.key === '/' && !typing) {
    event.preventDefault()
    $('filter').focus()
  } else if (event.key === 'r' && !typing && !event.ctrlKey && !event.metaKey) {
    loadReport().catch(showError)
  } else if (event.key === 'Escape' && event.target === $('filter')) {
    $('filter').value = ''
    document.querySelectorAll('#calls > .call').forEach(applyFilter)
    $('filter').blur()
  }
})
$('filter').addEventListener('input', () => document.querySelectorAll('#calls > .call').forEach(applyFilter))
$('refresh').addEventListener('click', () => loadReport().catch(showError))

loadReport()
  .then(() => loadReplay())
  .then(connect)
  .then(() => {
    loadQuestions().catch(showError)
    setInterval(() => loadQuestions().catch(showError), 2000)
  })
  .catch(showError)
