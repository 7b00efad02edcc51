// The approval gate from the MCP TypeScript SDK (v2, @modelcontextprotocol/client), over Streamable HTTP.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[2] ?? 'http://127.0.0.1:4800/mcp';
const gate = new Client({ name: 'example-agent', version: '1.0.0' });
await gate.connect(new StreamableHTTPClientTransport(new URL(url)));

const { tools } = await gate.listTools();
console.log('tools:', tools.map((t) => t.name).join(', '));
const prepared = await gate.callTool({
  name: 'approval_prepare',
  arguments: { kind: 'note.write', payload: { text: 'Hello from TypeScript' }, summary: 'Write a greeting' },
});
const { code, proposal_id } = prepared.structuredContent;
console.log('prepare:', code, proposal_id);
const status = await gate.callTool({ name: 'approval_status', arguments: { proposal_id } });
console.log('status:', status.structuredContent.code, status.structuredContent.status);
await gate.close();
