// MCP tool results as Faber values and model-facing text, and Faber results as MCP tool results.

import type { ToolResult } from '@faber/core'

interface ContentPart {
  type: string
  text?: string
  mimeType?: string
  data?: string
  uri?: string
  name?: string
  resource?: { uri?: string; mimeType?: string; text?: string; blob?: string }
}

/** one text per part: text as is, binary parts as a short placeholder so the model knows they were there */
function renderPart(part: ContentPart): string {
  switch (part.type) {
    case 'text':
      return part.text ?? ''
    case 'image':
    case 'audio':
      return `[${part.type} ${part.mimeType ?? 'unknown type'}, ${Math.floor(((part.data?.length ?? 0) * 3) / 4)} bytes]`
    case 'resource_link':
      return `[resource link ${part.uri}${part.name ? ` (${part.name})` : ''}]`
    case 'resource': {
      const resource = part.resource ?? {}
      if (typeof resource.text === 'string') return resource.text
      return `[resource ${resource.uri ?? ''} ${resource.mimeType ?? ''}, ${Math.floor(((resource.blob?.length ?? 0) * 3) / 4)} bytes]`.replace(/ {2,}/g, ' ')
    }
    default:
      return `[${part.type} content]`
  }
}

/** the text of an MCP result's content, parts joined by newlines */
export function renderContent(content: unknown): string {
  if (!Array.isArray(content)) return ''
  return content.map((part) => renderPart(part as ContentPart)).join('\n')
}

/** a Faber result as the answer to an MCP `tools/call` */
export function toCallToolResult(result: ToolResult) {
  const content = [{ type: 'text' as const, text: result.content }]
  if (result.isError)
    return {
      content,
      isError: true,
      _meta: { 'faber/error': { code: result.error.code, ...(result.error.toolCode ? { toolCode: result.error.toolCode } : {}) } },
    }
  const { value } = result
  const structured = typeof value === 'object' && value !== null && !Array.isArray(value) ? { structuredContent: value as Record<string, unknown> } : {}
  return { content, isError: false, ...structured }
}
