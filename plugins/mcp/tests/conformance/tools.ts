// the tools the MCP conformance suite's server scenarios call, written as an ordinary deployment's own tools: what
// they show is what any Faber tool gets when served by `faber mcp --http`

import { defineTool, type JsonSchema, t } from '@faber/core'
import type { Context } from 'cordis'

export const name = 'conformance-tools'
export const inject = ['tools']

export function apply(ctx: Context) {
  const logger = ctx.logger('conformance')
  ctx.tools.register(
    defineTool({
      name: 'test_simple_text',
      description: 'Answers a fixed sentence.',
      parameters: t.object({}),
      output: { schema: t.string() },
      execute: () => 'This is a simple text response for testing.',
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'test_error_handling',
      description: 'Always fails.',
      parameters: t.object({}),
      output: { schema: t.string() },
      execute: () => {
        throw new Error('This tool intentionally returns an error for testing')
      },
    }),
  )
  ctx.tools.register(
    defineTool({
      name: 'test_tool_with_logging',
      description: 'Logs three lines while it runs.',
      parameters: t.object({}),
      output: { schema: t.string() },
      execute: async () => {
        for (const step of ['starting', 'halfway', 'done']) {
          logger.info('test_tool_with_logging: %s', step)
          await new Promise((resolve) => setImmediate(resolve))
        }
        return 'Tool with logging executed successfully'
      },
    }),
  )
  // served as written: $schema, a root $defs that a local $ref names, additionalProperties
  const parameters: JsonSchema = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
    properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
    additionalProperties: false,
  }
  ctx.tools.register({
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    parameters,
    output: { schema: {} as JsonSchema },
    execute: (args) => args,
  })
}
